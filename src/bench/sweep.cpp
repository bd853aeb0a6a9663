#include "bench/sweep.h"

#include <fmt/format.h>
#include <omp.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/axes.h"
#include "bench/cli.h"
#include "bench/list.h"
#include "bench/plan.h"
#include "bench/preflight.h"
#include "bench/progress.h"
#include "bench/run.h"
#include "bench/seed_lines.h"
#include "bench/store.h"
#include "bench/threads.h"
#include "moe/gemm.h"

namespace moe::bench {
namespace {

struct Sweep {
  std::vector<Point> points;
  std::vector<BenchOptions> opts;  // per point
  bool resume = false;             // moe-bench sweep: skip the runs the store holds
};

size_t runs_of(const BenchOptions& o) {
  return o.distributions.size() * o.topks.size() * o.impls.size() * o.null_fracs.size();
}

// The inputs of the last point, reused while the shape, dtype, seed and device stay the same.
class InputsCache {
 public:
  const MoeInputs& host(const MoeConfig& c, Backend& backend) {
    const std::string key = fmt::format("{} {} {} {} {} {} {} {}", c.tokens, c.hidden, c.mlp_dim, c.experts,
                                        c.shared_expert_dim, dtype_name(c.dtype), c.seed, backend.name());
    if (key != key_) {
      in_.reset();
      host_ = make_inputs(c);
      in_ = to_memory(host_, backend.memory());
      key_ = key;
    }
    return host_;
  }
  const MoeInputs& device() const { return *in_; }

 private:
  std::string key_;
  MoeInputs host_;
  std::optional<MoeInputs> in_;
};

// Parses and checks every point before any runs.
Status prepare(const std::vector<std::string>& args, const std::string& command, Sweep& s, bool& exit_ok) {
  MOE_RETURN_IF_ERROR(expand_axes(args, s.points));
  for (const Point& p : s.points) {
    std::vector<std::string> argv_text = {"moe-bench"};
    argv_text.insert(argv_text.end(), p.args.begin(), p.args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    BenchOptions& o = s.opts.emplace_back();
    MOE_RETURN_IF_ERROR(parse_options(int(argv.size()), argv.data(), o, exit_ok));
    if (exit_ok) return Status::ok();
    o.command = command;
    if (s.resume && o.out_path.empty())
      return Status::error(
          "moe-bench sweep needs --out STORE: the jsonl store it appends to and resumes from");
    if (s.resume && o.format != OutputFormat::jsonl)
      return Status::error("moe-bench sweep writes its store as jsonl: drop --format");
  }
  if (s.opts.front().list) return Status::ok();
  if (s.points.size() > 1 && !s.opts.front().dump_dir.empty())
    return Status::error("--dump takes a single run (one distribution, topk and impl)");
  // A jsonl store this moe-bench cannot read back is refused before it grows (the sweep re-reads it anyway).
  if (!s.opts.front().out_path.empty() && s.opts.front().format == OutputFormat::jsonl)
    MOE_RETURN_IF_ERROR(StoreIndex(s.opts.front().out_path).refresh());
  std::unique_ptr<Comm> comm = make_local_comm();
  for (const BenchOptions& o : s.opts) {
    MOE_RETURN_IF_ERROR(set_thread_count(o.kernel.threads));
    MOE_RETURN_IF_ERROR(check_runnable(o, *backend_by_name(o.base.device), *comm));
    MOE_RETURN_IF_ERROR(preflight(o));
  }
  return Status::ok();
}

std::string run_name(const MoeConfig& c, const Point& p) {
  std::string s = fmt::format("{} topk={} {} null={:.2f}", name(c.distribution), c.topk, name(c.impl),
                              c.null_routing.frac);
  for (const auto& [flag, value] : p.axes)
    if (flag != "--topk" && flag != "--impl" && flag != "--distribution" && flag != "--null-route-frac")
      s += fmt::format(" {}={}", flag.substr(2), value);
  return s;
}

int run_sweep(const std::vector<std::string>& args, const std::string& command, bool resume) {
  Sweep s;
  s.resume = resume;
  bool exit_ok = false;
  if (Status st = prepare(args, command, s, exit_ok); !st) return fail(st);
  if (exit_ok) return 0;
  const BenchOptions& first = s.opts.front();
  if (first.list) {
    if (Status st = set_thread_count(first.kernel.threads); !st) return fail(st);
    print_list(first.base);
    return 0;
  }
  std::optional<StoreIndex> store;
  if (resume) {
    store.emplace(first.out_path);
    if (Status st = store->refresh(); !st) return fail(st);
  }
  size_t total = 0;
  for (const BenchOptions& o : s.opts) total += runs_of(o);
  Progress progress(total, resume);
  const Environment env = capture_environment();
  std::unique_ptr<Comm> comm = make_local_comm();
  CeilingCache ceilings;
  InputsCache inputs;
  std::string last_backend;
  bool any_check_failed = false;

  for (size_t pi = 0; pi < s.points.size(); ++pi) {
    const BenchOptions& o = s.opts[pi];
    MOE_CHECK(select_gemm_variant(o.kernel.gemm_variant), "parse_options checked the variant");
    if (Status st = set_thread_count(o.kernel.threads); !st) return fail(st);
    Backend& backend = *backend_by_name(o.base.device);
    const bool text_stdout = o.format == OutputFormat::text || !o.out_path.empty();
    bool point_started = false;
    for (Distribution dist : o.distributions)
      for (int64_t k : o.topks)
        for (Impl impl : o.impls)
          for (double f : o.null_fracs) {
            MoeConfig c = o.base;
            c.distribution = dist;
            c.topk = k;
            c.impl = impl;
            c.null_routing.frac = f;
            BenchOptions run_o = o;
            if (store) {
              if (Status st = store->refresh(); !st) return fail(st);
              run_o.queue_modes.clear();
              for (QueueMode m : o.queue_modes)
                if (!store->contains(run_id(c, o.kernel, protocol_of(o), name(m))))
                  run_o.queue_modes.push_back(m);
              if (run_o.queue_modes.empty()) {
                progress.skipped();
                continue;
              }
            }
            if (!point_started) {
              if (backend.name() != last_backend) {
                if (text_stdout) fmt::print("{}\n", devices_line({backend.devices()}));
                fmt::print(stderr, "moe-bench: device {} ({}), {} threads\n", backend.name(),
                           backend.description(), omp_get_max_threads());
                last_backend = backend.name();
              }
              if (text_stdout) fmt::print("{}\n", shape_line(o));
              point_started = true;
            }
            const MoeInputs& host_in = inputs.host(c, backend);
            const Ceiling ceiling = ceilings.get(o.ceiling, backend, c);
            // Same routing for every impl and fraction of a (distribution, topk): the null mask of a
            // larger fraction is a superset of a smaller one's.
            NullRoutingStats null_stats;
            const Routing routing = make_routing(c, &null_stats);
            RunOutcome r = run_one(run_o, c, backend, *comm, inputs.device(), host_in, routing, null_stats,
                                   ceiling, env);
            any_check_failed |= r.check_failed;
            if (!r.output_status) return fail(r.output_status);
            if (!r.numerics) {
              fmt::print(stderr, "moe-bench: error: {}\n", r.numerics.message());
              return 1;
            }
            if (!o.out_path.empty())
              if (Status st = append_rows(o.out_path, o.format, r.rows); !st) return fail(st);
            progress.done(run_name(c, s.points[pi]));
          }
  }
  if (resume && progress.skipped_runs() > 0)
    fmt::print(stderr, "moe-bench: {} of {} runs were in {} already; ran {}\n", progress.skipped_runs(),
               total, first.out_path, progress.ran());
  return any_check_failed ? 1 : 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  const std::vector<std::string> all(argv, argv + argc);
  return run_sweep({all.begin() + 1, all.end()}, shell_quote(all), false);
}

int sweep_main(int argc, char** argv) {
  const std::vector<std::string> all(argv, argv + argc);
  std::vector<std::string> rest;
  std::optional<std::string> plan;
  for (size_t i = 2; i < all.size(); ++i) {
    if (all[i] == "--plan" && i + 1 < all.size())
      plan = all[++i];
    else if (all[i].rfind("--plan=", 0) == 0)
      plan = all[i].substr(7);
    else if (all[i] == "--plan")
      return fail(Status::error("--plan needs a file"));
    else
      rest.push_back(all[i]);
  }
  // jsonl unless the flags say otherwise (which sweep then refuses); the plan's flags before the
  // command line's, so the command line overrides the plan.
  std::vector<std::string> args = {"--format=jsonl"};
  if (plan) {
    std::vector<std::string> from_plan;
    if (Status st = plan_args(*plan, from_plan); !st) return fail(st);
    args.insert(args.end(), from_plan.begin(), from_plan.end());
  }
  args.insert(args.end(), rest.begin(), rest.end());
  return run_sweep(args, shell_quote(all), true);
}

}  // namespace moe::bench
