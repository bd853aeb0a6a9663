// moe-bench: runs the seed harness's loop (distribution -> topk -> impl -> queue mode) on a backend and
// prints the seed's lines (spec §9.3) with our extra keys appended to RESULT. Results on stdout,
// progress and errors on stderr. Exit codes: 0 ok, 1 a --check failed or a result was not finite,
// 2 bad input (including a configuration the chosen backend or comm cannot run, and memory that
// cannot be allocated).
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "bench/ceiling.h"
#include "bench/finite.h"
#include "bench/options.h"
#include "bench/preflight.h"
#include "bench/report.h"
#include "bench/seed_lines.h"
#include "bench/threads.h"
#include "bench/timing.h"
#include "bench/trace.h"
#include "moe/backend.h"
#include "moe/block.h"
#include "moe/comm.h"
#include "moe/conditioned_check.h"
#include "moe/dump.h"
#include "moe/environment.h"
#include "moe/exchange.h"
#include "moe/file_io.h"
#include "moe/gemm.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/routing.h"

namespace moe::bench {
namespace {

// Every registered backend and, for the configuration the other flags describe, which ops it runs.
void print_list(const MoeConfig& c) {
  fmt::print("backends (--device; first = default), for this configuration:\n");
  for (Backend* b : registered_backends()) {
    fmt::print("  {}: {}\n", b->name(), b->description());
    for (OpKind op : kAllOps) {
      const Status s = b->supports(op, c);
      fmt::print("    {:<14} {}\n", name(op), s ? "yes" : "no: " + s.message());
    }
  }
  fmt::print("impls:");
  for (Impl i : kAllImpls) fmt::print(" {}", name(i));
  fmt::print(
      "\ngrouped_gemm backends: gmm (contiguous layout, tile-padded groups) ragged_dot (exact groups)\n");
  fmt::print("gemm variants of the cpu backend (first = default):\n");
  for (const GemmVariant& v : gemm_variants())
    fmt::print("  {}: {} [{}]\n", v.name, v.description, v.version());
  fmt::print("routing_pack_strategy: argsort tuple_sort expert_score_sort\n");
  fmt::print("dispatch_permute_mode: direct_take repeat_sort\ncombine: scatter unsort\n");
}

// Spec §9.4: each stage timed on its own (same warmup/iters); inputs of a stage come from one extra
// call of the previous stage. The shared expert is in no stage.
void print_stage_timing(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in,
                        const RoutingTensors& routing, MoeBlock& block, Backend& backend) {
  if (c.bench_pass != BenchPass::forward) {
    fmt::print(stderr, "moe-bench: --stage-timing is forward only; skipped for forward_backward\n");
    return;
  }
  auto sync = [&] { backend.synchronize(); };
  double pack = time_fn([&] { block.stage_pack_dispatch(in, routing); }, o.warmup, o.iters, sync).mean;
  double up = time_fn([&] { block.stage_up(in); }, o.warmup, o.iters, sync).mean;
  double down = time_fn([&] { block.stage_down(in); }, o.warmup, o.iters, sync).mean;
  double combine = time_fn([&] { block.stage_combine(routing); }, o.warmup, o.iters, sync).mean;
  fmt::print("{}", stage_lines(c, pack, up, down, combine));
}

// --check-perturb: the host copies --check compares, scaled by (1 + rel) (fresh copies: on a host
// backend the host copy is the block's own buffer).
Tensor perturbed(const Tensor& t, double rel) {
  Tensor p = t.clone();
  for (int64_t i = 0; i < p.numel(); ++i) p.set(i, p.get(i) * (1.0 + rel));
  return p;
}

struct RunOutcome {
  bool check_failed = false;
  Status output_status;  // a failed --dump or --trace-dir write, or a failed exchange (exit 2)
  Status numerics;       // NaN or inf in the results (exit 1)
  std::vector<ResultRow> rows;
};

// One run of the seed's loop on `backend`: `in` is in the backend's memory, `host_in` the same inputs
// on the host (for --check and --dump).
RunOutcome run_one(const BenchOptions& o, const MoeConfig& c, Backend& backend, Comm& comm,
                   const MoeInputs& in, const MoeInputs& host_in, const Routing& host_routing,
                   const NullRoutingStats& null_stats, std::optional<double> ceiling_tflops,
                   const Environment& env) {
  RunOutcome outcome;
  const bool text_stdout = o.format == OutputFormat::text || !o.out_path.empty();
  const std::string dist = name(c.distribution);
  const RoutingTensors routing = to_memory(host_routing, backend.memory());
  MoeBlock block(c, o.kernel, backend, comm);
  Tensor out = backend.empty(c.dtype, {c.tokens, c.hidden});
  std::optional<MoeGrads> grads;
  if (c.bench_pass == BenchPass::forward_backward) grads = make_grads(c, backend.memory());

  // The seed announces a run's trace directory before the run.
  std::string trace_run;
  std::vector<TraceEvent> events;
  if (!o.trace_dir.empty()) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    trace_run = trace_run_dir(o, c, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    outcome.output_status = prepare_output_dir("--trace-dir directory", trace_run);
    if (!outcome.output_status) return outcome;
    if (text_stdout) fmt::print("trace_dir={}\n", trace_run);
  }
  const std::string stats_lines = routing_lines(c, host_routing, null_stats);

  // --check, --dump and the finiteness scan read host copies of the last timed call's results, made
  // explicitly (no copy on a host backend).
  Tensor host_out;
  std::optional<MoeGrads> host_grads;
  for (size_t m = 0; m < o.queue_modes.size(); ++m) {
    const QueueMode mode = o.queue_modes[m];
    // The call this (pass, queue mode) times; prequeue packs and dispatches once, outside it.
    if (c.bench_pass == BenchPass::forward && mode == QueueMode::prequeue)
      outcome.output_status = block.prepare_dispatch(in, routing);
    auto call = [&] {
      Status s;
      if (c.bench_pass == BenchPass::forward_backward)
        s = block.forward_backward(out, *grads, in, routing);
      else if (mode == QueueMode::prequeue)
        s = block.forward_prepared(out, in, routing);
      else
        s = block.forward(out, in, routing);
      if (!s && outcome.output_status) outcome.output_status = s;
    };
    const TimingStats t = time_fn(call, o.warmup, o.iters, [&] { backend.synchronize(); });
    if (!outcome.output_status) return outcome;
    host_out = out.to_host();
    if (grads) host_grads = to_host(*grads);
    if (Status s = check_finite(host_out, host_grads ? &*host_grads : nullptr); !s) {
      outcome.numerics = Status::error(fmt::format("run distribution={} topk={} impl={} mode={}: {}", dist,
                                                   c.topk, name(c.impl), name(mode), s.message()));
      return outcome;
    }
    if (!trace_run.empty()) {
      // One extra, untimed call with every stage recorded (the seed's profiler trace, spec §1).
      block.set_stage_observer([&](const char* stage, auto start, auto end) {
        events.push_back({stage, int(m), start, end});
      });
      call();
      block.set_stage_observer(nullptr);
    }
    ResultRow row = make_row(c, o.kernel, name(mode), t, ceiling_tflops, block.saved_activation_bytes(),
                             omp_get_max_threads(), null_stats, env);
    if (text_stdout)
      fmt::print(
          "{}{}{}\n",
          mode_lines(c, name(mode), t.mean, row["tflops"].get<double>(), row["tokens_per_s"].get<double>()),
          stats_lines, result_text(row));
    outcome.rows.push_back(std::move(row));
  }
  if (!trace_run.empty()) {
    outcome.output_status = write_chrome_trace(trace_run, events);
    if (!outcome.output_status) return outcome;
  }

  if (o.stage_timing && text_stdout) print_stage_timing(o, c, in, routing, block, backend);
  if (!text_stdout) {
    static bool csv_header_printed = false;
    if (o.format == OutputFormat::csv && !csv_header_printed && !outcome.rows.empty()) {
      fmt::print("{}\n", csv_header(outcome.rows.front()));
      csv_header_printed = true;
    }
    for (const std::string& line : format_rows(o.format, outcome.rows)) fmt::print("{}\n", line);
  }

  if (o.check) {
    Tensor check_out = host_out;
    std::optional<MoeGrads> check_grads = host_grads;
    if (o.check_perturb != 0) {
      check_out = perturbed(host_out, o.check_perturb);
      if (check_grads)
        for (Tensor* g : {&check_grads->dx, &check_grads->dw1, &check_grads->dw3, &check_grads->dw2,
                          &check_grads->dsw1, &check_grads->dsw3, &check_grads->dsw2})
          *g = perturbed(*g, o.check_perturb);
    }
    const ConditionedCheck r =
        check_conditioned(c, host_in, host_routing, check_out, check_grads ? &*check_grads : nullptr);
    // In jsonl/csv mode stdout holds rows only, so the CHECK line goes to stderr.
    fmt::print(text_stdout ? stdout : stderr, "{}\n", check_line(c, r));
    outcome.check_failed = !r.pass;
    for (ResultRow& row : outcome.rows) add_check_fields(row, r);
  }
  if (!o.dump_dir.empty()) {
    // The output and gradients of the last timed call: deterministic, so they belong to these inputs.
    std::string extra =
        fmt::format("{{\"kernel\": {}, \"environment\": {}}}", o.kernel.to_json(), env.to_json());
    outcome.output_status = write_dump(o.dump_dir, c, extra, host_in, host_routing, host_out,
                                       host_grads ? &*host_grads : nullptr);
  }
  std::fflush(stdout);
  return outcome;
}

int fail(const Status& s) {
  fmt::print(stderr, "moe-bench: error: {}\n", s.message());
  return 2;
}

// Every configuration of the loop runs on the backend and over the comm: asked before anything is
// allocated, so a refusal is one line before any output.
Status check_runnable(const BenchOptions& o, Backend& backend, const Comm& comm) {
  MoeConfig c = o.base;
  for (int64_t k : o.topks)
    for (Impl impl : o.impls)
      for (double f : o.null_fracs) {
        c.topk = k;
        c.impl = impl;
        c.null_routing.frac = f;
        MOE_RETURN_IF_ERROR(backend.supports_block(c));
        MOE_RETURN_IF_ERROR(exchange_supports(c, comm));
      }
  return Status::ok();
}

int run(int argc, char** argv) {
  BenchOptions o;
  bool exit_ok = false;
  if (Status s = parse_options(argc, argv, o, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  if (Status s = set_thread_count(o.kernel.threads); !s) return fail(s);
  if (o.list) {
    print_list(o.base);
    return 0;
  }

  Backend& backend = *backend_by_name(o.base.device);
  std::unique_ptr<Comm> comm = make_local_comm();
  if (Status s = check_runnable(o, backend, *comm); !s) return fail(s);
  if (Status s = preflight(o); !s) return fail(s);
  const size_t n_runs = o.distributions.size() * o.topks.size() * o.impls.size() * o.null_fracs.size();

  const Environment env = capture_environment();
  if (o.format == OutputFormat::text || !o.out_path.empty())
    fmt::print("{}\n{}\n", devices_line({backend.devices()}), shape_line(o));
  fmt::print(stderr, "moe-bench: device {} ({}), {} threads\n", backend.name(), backend.description(),
             omp_get_max_threads());

  const MoeInputs host_in = make_inputs(o.base);
  const MoeInputs in = to_memory(host_in, backend.memory());
  bool any_check_failed = false;
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  std::map<int64_t, Ceiling> ceilings;  // by topk: the ceiling GEMM's shape does not depend on the rest
  for (Distribution dist : o.distributions) {
    for (int64_t k : o.topks) {
      MoeConfig c = o.base;
      c.distribution = dist;
      c.topk = k;
      if (!ceilings.count(k)) ceilings[k] = measure_ceiling(backend, c);
      const std::optional<double> ceiling = ceilings[k].tflops;
      for (Impl impl : o.impls) {
        for (double f : o.null_fracs) {
          c.impl = impl;
          c.null_routing.frac = f;
          // Same routing for every impl and fraction of a (distribution, topk): the null mask of a larger
          // fraction is a superset of a smaller one's.
          NullRoutingStats null_stats;
          Routing routing = make_routing(c, &null_stats);
          RunOutcome r = run_one(o, c, backend, *comm, in, host_in, routing, null_stats, ceiling, env);
          any_check_failed |= r.check_failed;
          if (!r.output_status) return fail(r.output_status);
          if (!r.numerics) {
            fmt::print(stderr, "moe-bench: error: {}\n", r.numerics.message());
            return 1;
          }
          if (!o.out_path.empty())
            if (Status s = append_rows(o.out_path, o.format, r.rows); !s) return fail(s);
          ++done;
          const double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (n_runs > 1 && elapsed > 3.0)
            fmt::print(
                stderr,
                "moe-bench: run {}/{} done ({} topk={} {} null={:.2f}), elapsed {:.1f}s, ETA {:.1f}s\n", done,
                n_runs, name(dist), k, name(impl), f, elapsed,
                elapsed / double(done) * double(n_runs - done));
        }
      }
    }
  }
  return any_check_failed ? 1 : 0;
}

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) {
  try {
    return moe::bench::run(argc, argv);
  } catch (const moe::AllocationError& e) {
    // A real allocation failure is a resource the user asked for, not a bug: one line, exit 2.
    std::fprintf(stderr, "moe-bench: error: %s\n", e.what());
    return 2;
  }
}
