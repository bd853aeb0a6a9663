#include "bench/research/sweep.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/harness/backends.h"
#include "bench/harness/cli.h"
#include "bench/harness/list.h"
#include "bench/harness/models.h"
#include "bench/harness/preflight.h"
#include "bench/harness/run.h"
#include "bench/harness/seed_lines.h"
#include "bench/harness/threads.h"
#include "bench/probes/wait_policy.h"
#include "bench/research/axes.h"
#include "bench/research/claims.h"
#include "bench/research/plan.h"
#include "bench/research/progress.h"
#include "bench/research/store.h"
#include "cpu/gemm/gemm.h"
#include "moe/parallel.h"

namespace moe::bench {
namespace {

struct Sweep {
  std::vector<Point> points;
  std::vector<BenchOptions> opts;  // per point
  bool resume = false;             // moe-bench sweep: skip the runs the store holds
};

// The inputs of the last point, reused while the shape, dtype, seed, device and this rank's slices stay
// the same. A rank of a parallel run draws only its slices (moe/parallel.h).
class InputsCache {
 public:
  const MoeInputs& host(const MoeConfig& c, Backend& backend, const Comm& comm) {
    const RankLayout l = rank_layout(c, comm.rank(), comm.size());
    const std::string key =
        fmt::format("{} {} {} {} {} {} {} {} {} {}", c.tokens, c.hidden, c.mlp_dim, c.experts,
                    c.shared_expert_dim, dtype_name(c.dtype), c.seed, backend.name(), describe(l),
                    name(c.quant_mode));  // prequant's inputs carry quantized weights
    if (key != key_) {
      in_.reset();
      host_ = make_rank_inputs(c, l);
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

// Parses every point; nothing here may start MPI or read a file twice (the process may execute itself
// again after it: settle_wait_policy).
Status parse_points(const std::vector<std::string>& args, const std::string& command, Sweep& s,
                    bool& exit_ok) {
  std::vector<std::string> full = args;
  MOE_RETURN_IF_ERROR(expand_abbreviations(full));
  MOE_RETURN_IF_ERROR(expand_axes(full, s.points));
  for (const Point& p : s.points) {
    std::vector<std::string> point_args = p.args;
    std::string model;
    MOE_RETURN_IF_ERROR(expand_model_presets(point_args, &model));
    std::vector<std::string> argv_text = {"moe-bench"};
    argv_text.insert(argv_text.end(), point_args.begin(), point_args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    BenchOptions& o = s.opts.emplace_back();
    MOE_RETURN_IF_ERROR(parse_options(int(argv.size()), argv.data(), o, exit_ok));
    if (exit_ok) return Status::ok();
    o.command = command;
    o.model = model;
    if (s.resume && o.out_path.empty())
      return Status::error(
          "moe-bench sweep needs --out STORE: the jsonl store it appends to and resumes from");
    if (s.resume && o.format != OutputFormat::jsonl)
      return Status::error("moe-bench sweep writes its store as jsonl: drop --format");
  }
  for (const BenchOptions& o : s.opts)
    if (o.wait_policy != s.opts.front().wait_policy)
      return Status::error(
          "--wait-policy takes one value: it is the whole process's (OpenMP reads it at start)");
  return Status::ok();
}

// The threads auto's probe starts: the most any point runs.
int most_threads(const Sweep& s) {
  int most = 1;
  for (const BenchOptions& o : s.opts)
    most = std::max(most, o.kernel.threads > 0 ? o.kernel.threads : omp_get_max_threads());
  // A count set_thread_count will refuse is not started here either.
  return std::min(most, kMaxThreadsPerCore * available_cores());
}

// Checks every point before any runs.
Status check_points(Sweep& s, BackendPool& backends) {
  if (s.opts.front().list || s.opts.front().peak) return Status::ok();
  if (s.points.size() > 1 && !s.opts.front().dump_dir.empty())
    return Status::error("--dump takes a single run (one distribution, topk and impl)");
  Comm& comm = world_comm();
  for (const BenchOptions& o : s.opts) {
    MOE_RETURN_IF_ERROR(set_thread_count(o.kernel.threads));
    MOE_RETURN_IF_ERROR(check_runnable(o, backends.get(o.base.device, o.kernel), comm));
    MOE_RETURN_IF_ERROR(preflight(o));
    // One csv file holds one header: points whose rows have other columns (--check=false,true) cannot share
    // it.
    if (o.format == OutputFormat::csv && expected_header(o) != expected_header(s.opts.front()))
      return Status::error(
          "the points' csv rows have different columns (--check on some of them): use --format jsonl");
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

// FNV-1a 64 of the points' flags: what every rank must agree on before any runs.
int64_t plan_hash(const Sweep& s) {
  uint64_t h = 1469598103934665603ull;
  for (const Point& p : s.points)
    for (const std::string& a : p.args)
      for (char ch : a + '\0') h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return int64_t(h);
}

// Over several ranks, every rank learns each rank's pre-run check (`checked`: a path present on one host
// only fails there) and whether all have the same points (a --plan file or the command line may differ
// between hosts), in one all-gather that every rank reaches: a rank that stopped at its check would leave
// the others waiting in the first collective of the run. A rank whose check failed returns its error (its
// line); the others set `another_refused` and stop without a line of their own.
Status check_ranks_agree(Comm& world, const Sweep& s, const Status& checked, bool& another_refused) {
  another_refused = false;
  if (world.size() == 1) return checked;
  Tensor mine(Dtype::s64, {2}), all(Dtype::s64, {2 * world.size()});
  mine.data<int64_t>()[0] = checked.is_ok();
  mine.data<int64_t>()[1] = plan_hash(s);
  MOE_RETURN_IF_ERROR(world.all_gather(all, mine));
  if (!checked) return checked;
  const int64_t* rank = all.data<int64_t>();  // (ok, points) per rank
  for (int r = 0; r < world.size(); ++r) another_refused |= rank[2 * r] == 0;
  if (another_refused) return Status::ok();
  for (int r = 1; r < world.size(); ++r)
    if (rank[2 * r + 1] != rank[1])
      return Status::error(fmt::format(
          "rank {} has other sweep points than rank 0 (a --plan file or flags that differ between hosts?)",
          r));
  return Status::ok();
}

// Runs the points of a prepared sweep, with what their runs share: the store, the progress line, the
// comm, the ceilings and the inputs. Each step returns an exit code to stop with, or nullopt to go on.
class Runner {
 public:
  Runner(const Sweep& s, BackendPool& backends)
      : s_(s), backends_(backends), progress_(total_runs(s), s.resume), comm_(world_comm()) {}

  // Over several ranks rank 0 alone reads and writes the store and its claims; the others take its
  // verdicts (share_verdict), so every rank runs the same runs.
  std::optional<int> start() {
    if (!s_.resume || comm_.rank() != 0) return std::nullopt;
    store_.emplace(s_.opts.front().out_path);
    claims_.emplace(s_.opts.front().out_path);
    if (Status st = store_->refresh(); !st) return stop(fail(st));
    return std::nullopt;
  }

  // The runs other sweeps held when their turn came: each is waited for until its rows are in the store
  // (skipped) or its claimer has died (run here).
  std::optional<int> deferred() {
    if (!deferred_.empty() && comm_.rank() == 0)
      fmt::print(stderr, "moe-bench: waiting for {} run{} that other sweeps are running in {}\n",
                 deferred_.size(), deferred_.size() == 1 ? "" : "s", s_.opts.front().out_path);
    while (!deferred_.empty()) {
      std::vector<std::pair<size_t, MoeConfig>> round;
      round.swap(deferred_);
      for (const auto& [pi, c] : round) {
        point_started_ = false;  // the point's shape line again, before its run
        if (std::optional<int> stop = run(pi, c)) return stop;
      }
      if (!deferred_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return std::nullopt;
  }

  std::optional<int> point(size_t pi) {
    const BenchOptions& o = s_.opts[pi];
    if (Status st = set_thread_count(o.kernel.threads); !st) return fail(st);
    // After the variant and thread count are set: the environment names both.
    env_ = capture_environment();
    point_started_ = false;
    for (Distribution dist : o.distributions)
      for (int64_t k : o.topks)
        for (Impl impl : o.impls)
          for (double f : o.null_fracs) {
            MoeConfig c = o.base;
            c.distribution = dist;
            c.topk = k;
            c.impl = impl;
            c.null_routing.frac = f;
            if (std::optional<int> stop = run(pi, c)) return stop;
          }
    return std::nullopt;
  }

  int finish() const {
    if (s_.resume && progress_.skipped_runs() > 0 && comm_.rank() == 0)
      fmt::print(stderr, "moe-bench: {} of {} runs were in {} already; ran {}\n", progress_.skipped_runs(),
                 total_runs(s_), s_.opts.front().out_path, progress_.ran());
    return any_check_failed_ ? 1 : 0;
  }

 private:
  static size_t total_runs(const Sweep& s) {
    size_t total = 0;
    for (const BenchOptions& o : s.opts)
      total += o.distributions.size() * o.topks.size() * o.impls.size() * o.null_fracs.size();
    return total;
  }

  std::optional<int> run(size_t pi, const MoeConfig& c) {
    const BenchOptions& o = s_.opts[pi];
    BenchOptions run_o = o;
    std::vector<std::string> claimed;
    if (s_.resume) {  // only the queue modes whose rows the store lacks, once claimed (claims.h)
      std::vector<std::string> ids;
      for (QueueMode m : o.queue_modes) ids.push_back(run_id(c, o.kernel, protocol_of(o), name(m)));
      Claims::Verdict verdict = Claims::Verdict::mine;
      if (store_)
        if (Status st = claims_->claim(ids, *store_, verdict, claimed); !st) return stop(fail(st));
      if (Status st = share_verdict(ids, verdict, claimed); !st) return stop(fail(st));
      if (verdict == Claims::Verdict::taken) {
        deferred_.emplace_back(pi, c);
        return std::nullopt;
      }
      if (verdict == Claims::Verdict::done) {
        progress_.skipped();
        return std::nullopt;
      }
      run_o.queue_modes.clear();
      for (size_t m = 0; m < ids.size(); ++m)
        if (std::find(claimed.begin(), claimed.end(), ids[m]) != claimed.end())
          run_o.queue_modes.push_back(o.queue_modes[m]);
    }
    Backend& backend = backends_.get(o.base.device, o.kernel);
    announce_point(o, backend);
    const MoeInputs& host_in = inputs_.host(c, backend, comm_);
    const Ceiling ceiling = ceilings_.get(o.ceiling, backend, c, o.with_peak);
    // Same routing for every impl and fraction of a (distribution, topk): the null mask of a larger
    // fraction is a superset of a smaller one's.
    NullRoutingStats null_stats;
    const Routing routing = make_routing(c, &null_stats);
    RunOutcome r = run_one({run_o, c, backend, comm_, inputs_.device(), host_in, routing, null_stats, ceiling,
                            env_, &csv_header_printed_});
    any_check_failed_ |= r.check_failed;
    // Over several ranks an error one rank met may not be the others' (a file, a NaN in its slice):
    // it ends the whole job, so that none waits for it in a collective.
    if (!r.output_status) return stop(fail(r.output_status));
    if (!r.numerics) {
      fmt::print(stderr, "moe-bench: error: {}\n", r.numerics.message());
      return stop(1);
    }
    if (!o.out_path.empty() && comm_.rank() == 0)
      if (Status st = append_rows(o.out_path, o.format, r.rows); !st) return fail(st);
    if (!claimed.empty() && claims_)
      if (Status st = claims_->release(claimed); !st) return stop(fail(st));
    if (comm_.rank() == 0) progress_.done(run_name(c, s_.points[pi]));
    return std::nullopt;
  }

  // Rank 0's verdict on a run and the ids it claimed, on every rank (nothing to do on one).
  Status share_verdict(const std::vector<std::string>& ids, Claims::Verdict& verdict,
                       std::vector<std::string>& claimed) {
    if (comm_.size() == 1) return Status::ok();
    const int64_t n = 1 + int64_t(ids.size());
    Tensor mine(Dtype::s64, {n}), all(Dtype::s64, {n * comm_.size()});
    int64_t* m = mine.data<int64_t>();  // (1 + ids) verdict, then 1 per claimed id
    m[0] = int64_t(verdict);
    for (size_t i = 0; i < ids.size(); ++i)
      m[1 + i] = std::find(claimed.begin(), claimed.end(), ids[i]) != claimed.end();
    MOE_RETURN_IF_ERROR(comm_.all_gather(all, mine));
    const int64_t* root = all.data<int64_t>();  // rank 0's
    verdict = Claims::Verdict(root[0]);
    if (comm_.rank() == 0) return Status::ok();
    claimed.clear();
    for (size_t i = 0; i < ids.size(); ++i)
      if (root[1 + i]) claimed.push_back(ids[i]);
    return Status::ok();
  }

  int stop(int code) {
    if (comm_.size() > 1) comm_.abort(code);
    return code;
  }

  // The seed's devices line (when the backend changes) and shape line, before a point's first run.
  void announce_point(const BenchOptions& o, Backend& backend) {
    if (point_started_) return;
    point_started_ = true;
    const bool text_stdout = o.format == OutputFormat::text || !o.out_path.empty();
    if (backend.name() != last_backend_) {
      if (text_stdout) fmt::print("{}\n", devices_line(world_devices(backend.devices(), comm_.size())));
      if (comm_.rank() == 0 && (o.verbose || total_runs(s_) > 1 || ::isatty(STDERR_FILENO)))
        fmt::print(
            stderr, "moe-bench: device {} ({}), {} threads{}, OpenMP waits {}\n", backend.name(),
            backend.description(), omp_get_max_threads(),
            comm_.size() > 1 ? fmt::format(" on each of {} ranks ({})", comm_.size(), comm_.name()) : "",
            describe(process_wait_policy()));
      last_backend_ = backend.name();
    }
    if (text_stdout) fmt::print("{}\n", shape_line(o));
  }

  const Sweep& s_;
  BackendPool& backends_;
  Progress progress_;
  Comm& comm_;
  bool csv_header_printed_ = false;
  std::optional<StoreIndex> store_;
  std::optional<Claims> claims_;
  std::vector<std::pair<size_t, MoeConfig>> deferred_;  // (point, run) another sweep held
  CeilingCache ceilings_;
  InputsCache inputs_;
  Environment env_;
  std::string last_backend_;
  bool point_started_ = false;
  bool any_check_failed_ = false;
};

int run_sweep(const std::vector<std::string>& args, const std::string& command, bool resume, char** argv) {
  // Under mpirun every rank runs the same points; rank 0 alone prints results (the others' stdout
  // goes nowhere) and writes files. Errors are printed by every rank that meets them.
  if (!built_with_mpi() && launched_world_size() > 1)
    return fail(Status::error(fmt::format(
        "this moe-bench was built without MPI: under a launcher of {} processes each would run alone "
        "(install libopenmpi-dev and rebuild)",
        launched_world_size())));
  Sweep s;
  s.resume = resume;
  bool exit_ok = false;
  if (Status st = parse_points(args, command, s, exit_ok); !st) return fail(st);
  if (exit_ok) return 0;
  const BenchOptions& first = s.opts.front();
  // Before MPI starts and anything is allocated: this may execute the program again. --list only says
  // what a run would choose.
  if (!first.list) settle_wait_policy(first.wait_policy, most_threads(s), argv);
  Comm& world = world_comm();
  if (world.rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    return fail(Status::error("rank " + std::to_string(world.rank()) + ": cannot close its stdout"));
  BackendPool backends;  // before the runner and its caches: tensors in their memory die first
  const Status checked = check_points(s, backends);
  if (checked && (first.list || first.peak)) {
    if (Status st = set_thread_count(first.kernel.threads); !st) return fail(st);
    if (first.list) print_list(first.base, first.kernel, first.wait_policy, most_threads(s));
    if (first.peak) print_peaks(first.kernel);
    return 0;
  }
  bool another_refused = false;
  if (Status st = check_ranks_agree(world, s, checked, another_refused); !st) return fail(st);
  if (another_refused) return 2;  // that rank printed why
  // A jsonl store this moe-bench cannot read back is refused before it grows (the sweep re-reads it
  // anyway); rank 0 owns it, and an error only it meets ends the job.
  if (!first.out_path.empty() && first.format == OutputFormat::jsonl && world.rank() == 0)
    if (Status st = StoreIndex(first.out_path).refresh(); !st) {
      const int code = fail(st);
      if (world.size() > 1) world.abort(code);
      return code;
    }
  Runner runner(s, backends);
  if (std::optional<int> stop = runner.start()) return *stop;
  for (size_t pi = 0; pi < s.points.size(); ++pi)
    if (std::optional<int> stop = runner.point(pi)) return *stop;
  if (std::optional<int> stop = runner.deferred()) return *stop;
  return runner.finish();
}

}  // namespace

int bench_main(int argc, char** argv) {
  const std::vector<std::string> all(argv, argv + argc);
  return run_sweep({all.begin() + 1, all.end()}, shell_quote(all), false, argv);
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
  return run_sweep(args, shell_quote(all), true, argv);
}

}  // namespace moe::bench
