// moe-bench: runs the seed harness's loop (distribution -> topk -> impl -> queue mode) on the CPU and
// prints the seed's lines (spec §9.3) with our extra keys appended to RESULT. Results on stdout,
// progress and errors on stderr. Exit codes: 0 ok, 1 a --check failed, 2 bad input.
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "bench/accounting.h"
#include "bench/options.h"
#include "bench/preflight.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "bench/trace.h"
#include "moe/backend.h"
#include "moe/block.h"
#include "moe/check.h"
#include "moe/dump.h"
#include "moe/environment.h"
#include "moe/gemm.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/routing.h"

namespace moe::bench {
namespace {

const char* py_bool(bool b) {
  return b ? "True" : "False";
}

void print_shape_line(const BenchOptions& o) {
  const MoeConfig& c = o.base;
  std::string queue = o.queue_modes.size() == 2 ? "both" : name(o.queue_modes.front());
  fmt::print(
      "shape tokens={} hidden={} mlp_dim={} experts={} topk={} dtype={} backend={} impl={} "
      "shared_expert_dim={} "
      "shared_fused={} bench_pass={} parallel_mode=none ep_comm_path=compact_psum queue_mode={} "
      "routing_pack_strategy={} dispatch_permute_mode={} use_custom_sort_vjp={} remat_mode={} "
      "capacity_policy={} capacity_factor={} null_route_frac={} null_experts={} null_routing_mode={} "
      "renormalize_real_after_null={} stage_timing={}\n",
      c.tokens, c.hidden, c.mlp_dim, c.experts, c.topk, dtype_name(c.dtype), name(c.backend),
      o.impls.size() > 1 ? "both" : name(o.impls.front()), c.shared_expert_dim, py_bool(c.shared_fused),
      name(c.bench_pass), queue, name(c.pack_strategy), name(c.permute_mode), py_bool(c.use_custom_sort_vjp),
      name(c.remat_mode), name(c.capacity_policy), c.capacity_factor, c.null_routing.frac,
      c.null_routing.null_experts, name(c.null_routing.mode), py_bool(c.null_routing.renormalize),
      py_bool(o.stage_timing));
}

void print_list() {
  fmt::print("backends:");
  for (const Backend& b : registered_backends()) fmt::print(" {} ({})", b.name, b.description);
  fmt::print("\nimpls:");
  for (Impl i : kAllImpls) fmt::print(" {}", name(i));
  fmt::print(
      "\ngrouped_gemm backends: gmm (contiguous layout, tile-padded groups) ragged_dot (exact groups)\n");
  fmt::print("gemm variants (first = default):\n");
  for (const GemmVariant& v : gemm_variants())
    fmt::print("  {}: {} [{}]\n", v.name, v.description, v.version());
  fmt::print("routing_pack_strategy: argsort tuple_sort expert_score_sort\n");
  fmt::print("dispatch_permute_mode: direct_take repeat_sort\ncombine: scatter unsort\n");
}

// The dense GEMM ceiling: [T*K, H] x [H, 2M] in the run dtype through the same library, same process.
double measure_ceiling_tflops(const MoeConfig& c, int warmup, int iters) {
  const int64_t R = c.assignments(), Kd = c.hidden, N = 2 * c.mlp_dim;
  Tensor a(c.dtype, {R, Kd}), b(c.dtype, {Kd, N}), out(c.dtype, {R, N});
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, float((i * 7919) % 1000) * 1e-3f - 0.5f);
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, float((i * 104729) % 1000) * 1e-3f - 0.5f);
  TimingStats t =
      time_fn([&] { dense_gemm(out.raw(), c.dtype, a.raw(), c.dtype, b.raw(), c.dtype, R, Kd, N); }, warmup,
              std::max(iters, 3));
  return 2.0 * double(R) * double(Kd) * double(N) / t.mean / 1e12;
}

// Spec §9.4: each stage timed on its own (same warmup/iters); inputs of a stage come from one extra
// call of the previous stage. The shared expert is in no stage.
void print_stage_timing(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in,
                        const Routing& routing, MoeBlock& block) {
  const std::string dist = name(c.distribution);
  if (c.bench_pass != BenchPass::forward) {
    fmt::print(stderr, "moe-bench: --stage-timing is forward only; skipped for forward_backward\n");
    return;
  }
  double pack = time_fn([&] { block.stage_pack(routing), block.stage_dispatch(in); }, o.warmup, o.iters).mean;
  double up = time_fn([&] { block.stage_up(in, true); }, o.warmup, o.iters).mean;
  double down = time_fn([&] { block.stage_down(in); }, o.warmup, o.iters).mean;
  double combine = time_fn([&] { block.stage_combine(routing); }, o.warmup, o.iters).mean;
  const double total = pack + up + down + combine;
  fmt::print("[{}] pass=forward stage pack_s={:.6f}\n[{}] pass=forward stage up_s={:.6f}\n", dist, pack, dist,
             up);
  fmt::print("[{}] pass=forward stage down_s={:.6f}\n[{}] pass=forward stage combine_s={:.6f}\n", dist, down,
             dist, combine);
  fmt::print("[{}] pass=forward stage_pct pack={:.1f} up={:.1f} down={:.1f} combine={:.1f}\n", dist,
             100 * pack / total, 100 * up / total, 100 * down / total, 100 * combine / total);
}

struct RunOutcome {
  bool check_failed = false;
  Status output_status;  // a failed --dump or --trace-dir write
  std::vector<ResultRow> rows;
};

RunOutcome run_one(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in, const Routing& routing,
                   const NullRoutingStats& null_stats, double ceiling_tflops, const Environment& env) {
  RunOutcome outcome;
  const bool text_stdout = o.format == OutputFormat::text || !o.out_path.empty();
  const std::string dist = name(c.distribution);
  MoeBlock block(c, o.kernel);
  Tensor out(c.dtype, {c.tokens, c.hidden});
  std::optional<MoeGrads> grads;
  if (c.bench_pass == BenchPass::forward_backward) grads = make_grads(c);

  for (QueueMode mode : o.queue_modes) {
    // The call this (pass, queue mode) times; prequeue packs and dispatches once, outside it.
    if (c.bench_pass == BenchPass::forward && mode == QueueMode::prequeue)
      block.prepare_dispatch(in, routing);
    auto call = [&] {
      if (c.bench_pass == BenchPass::forward_backward)
        block.forward_backward(out, *grads, in, routing);
      else if (mode == QueueMode::prequeue)
        block.forward_prepared(out, in, routing);
      else
        block.forward(out, in, routing);
    };
    const TimingStats t = time_fn(call, o.warmup, o.iters);
    if (!o.trace_dir.empty()) {
      // One extra, untimed call with every stage recorded (the seed's profiler trace, spec §1).
      std::vector<TraceEvent> events;
      block.set_stage_observer([&](const char* stage, auto start, auto end) {
        events.push_back({stage, start, end});
      });
      call();
      block.set_stage_observer(nullptr);
      const std::string subdir =
          fmt::format("{}_{}_topk{}_{}_null{:.2f}_none_compact_psum_{}_{}",
                      std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      dist, c.topk, name(c.impl), c.null_routing.frac, name(c.bench_pass), name(mode));
      std::string written;
      outcome.output_status = write_chrome_trace(o.trace_dir, subdir, events, written);
      if (!outcome.output_status) return outcome;
      if (text_stdout) fmt::print("trace_dir={}\n", written);
    }
    ResultRow row = make_row(c, o.kernel, name(mode), t, ceiling_tflops, block.saved_activation_bytes(),
                             omp_get_max_threads(), null_stats, env);
    if (text_stdout) {
      const std::string head = fmt::format("[{}] mode={} pass={} topk={} impl={}", dist, name(mode),
                                           name(c.bench_pass), c.topk, name(c.impl));
      fmt::print("{} backend={}\n{} remat_mode={}\n{} parallel_mode=none\n{} ep_comm_path=compact_psum\n",
                 head, name(c.backend), head, name(c.remat_mode), head, head);
      fmt::print("{} time_s={:.6f}\n{} tflops={:.3f}\n{} tokens_per_s={:.2f}\n", head, t.mean, head,
                 row["tflops"].get<double>(), head, row["tokens_per_s"].get<double>());
    }
    outcome.rows.push_back(std::move(row));
  }

  if (o.stage_timing && text_stdout) print_stage_timing(o, c, in, routing, block);
  if (text_stdout) {
    RunStats rs = run_stats(routing);
    LoadStats ls = load_stats(routing);
    const std::string tag = fmt::format("[{}] topk={} impl={}", dist, c.topk, name(c.impl));
    fmt::print("{} run_stats runs={:.0f} mean={:.2f} p95={:.2f} max={:.0f}\n", tag, rs.runs, rs.mean, rs.p95,
               rs.max);
    fmt::print("{} load_stats min={:.0f} max={:.0f} std={:.2f} cv={:.4f}\n", tag, ls.min, ls.max, ls.std,
               ls.cv);
    const DispatchPlan& plan = block.plan();
    fmt::print("{} capacity policy={} factor={:.3f} cap={} dropped={} drop_frac={:.4f}\n", tag,
               name(c.capacity_policy), c.capacity_factor, c.capacity(), plan.dropped,
               double(plan.dropped) / double(std::max<int64_t>(1, c.assignments())));
    if (o.null_routing_requested)
      fmt::print(
          "{} null_route mode={} target={:.3f} realized={:.3f} null_experts={} null_assignments={} "
          "real_assignments={}\n",
          tag, name(c.null_routing.mode), null_stats.target, null_stats.realized, null_stats.null_experts,
          null_stats.null_assignments, null_stats.real_assignments);
    for (const ResultRow& row : outcome.rows) fmt::print("{}\n", result_text(row));
  } else {
    static bool csv_header_printed = false;
    if (o.format == OutputFormat::csv && !csv_header_printed && !outcome.rows.empty()) {
      fmt::print("{}\n", csv_header(outcome.rows.front()));
      csv_header_printed = true;
    }
    for (const std::string& line : format_rows(o.format, outcome.rows)) fmt::print("{}\n", line);
  }

  if (o.check) {
    CheckResult r = check_against_reference(c, in, routing, out, grads ? &*grads : nullptr);
    std::string grad_err = r.grad_rel_err < 0 ? "none" : fmt::format("{:.3e}", r.grad_rel_err);
    // In jsonl/csv mode stdout holds rows only, so the CHECK line goes to stderr.
    fmt::print(text_stdout ? stdout : stderr,
               "CHECK pass={} out_rel_err={:.3e} grad_rel_err={} tol={:.1e} distribution={} topk={} impl={} "
               "bench_pass={}\n",
               r.pass ? "true" : "false", r.out_rel_err, grad_err, r.tol, dist, c.topk, name(c.impl),
               name(c.bench_pass));
    outcome.check_failed = !r.pass;
    for (ResultRow& row : outcome.rows) {
      row["check_pass"] = r.pass;
      row["check_out_rel_err"] = r.out_rel_err;
      row["check_grad_rel_err"] = r.grad_rel_err;
    }
  }
  if (!o.dump_dir.empty()) {
    // The output and gradients of the last timed call: deterministic, so they belong to these inputs.
    std::string extra =
        fmt::format("{{\"kernel\": {}, \"environment\": {}}}", o.kernel.to_json(), env.to_json());
    outcome.output_status = write_dump(o.dump_dir, c, extra, in, routing, out, grads ? &*grads : nullptr);
  }
  std::fflush(stdout);
  return outcome;
}

int fail(const Status& s) {
  fmt::print(stderr, "moe-bench: error: {}\n", s.message());
  return 2;
}

int run(int argc, char** argv) {
  BenchOptions o;
  bool exit_ok = false;
  if (Status s = parse_options(argc, argv, o, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  if (o.list) {
    print_list();
    return 0;
  }
  if (o.kernel.threads > 0) omp_set_num_threads(o.kernel.threads);

  if (Status s = preflight(o); !s) return fail(s);
  const size_t n_runs = o.distributions.size() * o.topks.size() * o.impls.size() * o.null_fracs.size();

  const Environment env = capture_environment();
  if (o.format == OutputFormat::text || !o.out_path.empty()) print_shape_line(o);
  fmt::print(stderr, "moe-bench: {} threads, GEMM library: {}\n", omp_get_max_threads(), env.gemm_library);

  MoeInputs in = make_inputs(o.base);
  bool any_check_failed = false;
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (Distribution dist : o.distributions) {
    for (int64_t k : o.topks) {
      MoeConfig c = o.base;
      c.distribution = dist;
      c.topk = k;
      const double ceiling = measure_ceiling_tflops(c, o.warmup, o.iters);
      for (Impl impl : o.impls) {
        for (double f : o.null_fracs) {
          c.impl = impl;
          c.null_routing.frac = f;
          // Same routing for every impl and fraction of a (distribution, topk): the null mask of a larger
          // fraction is a superset of a smaller one's.
          NullRoutingStats null_stats;
          Routing routing = make_routing(c, &null_stats);
          RunOutcome r = run_one(o, c, in, routing, null_stats, ceiling, env);
          any_check_failed |= r.check_failed;
          if (!r.output_status) return fail(r.output_status);
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
  return moe::bench::run(argc, argv);
}
