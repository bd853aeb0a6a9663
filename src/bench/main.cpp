// moe-bench: runs the seed harness's loop (distribution -> topk -> impl -> queue mode) on the CPU and
// prints the seed's lines (spec §9.3) with our extra keys appended to RESULT. Results on stdout,
// progress and errors on stderr. Exit codes: 0 ok, 1 a --check failed, 2 bad input.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <optional>

#include "bench/accounting.h"
#include "bench/options.h"
#include "bench/timing.h"
#include "moe/block.h"
#include "moe/check.h"
#include "moe/dump.h"
#include "moe/gemm.h"
#include "moe/inputs.h"
#include "moe/routing.h"

namespace moe::bench {
namespace {

const char* py_bool(bool b) { return b ? "True" : "False"; }

void print_shape_line(const BenchOptions& o) {
  const MoeConfig& c = o.base;
  std::string queue = o.queue_modes.size() == 2 ? "both" : name(o.queue_modes.front());
  fmt::print(
      "shape tokens={} hidden={} mlp_dim={} experts={} topk={} dtype={} backend={} impl={} shared_expert_dim={} "
      "shared_fused={} bench_pass={} parallel_mode=none ep_comm_path=compact_psum queue_mode={} "
      "routing_pack_strategy={} dispatch_permute_mode={} use_custom_sort_vjp=False remat_mode={} "
      "capacity_policy={} capacity_factor={} null_route_frac=0.0 null_experts=0 null_routing_mode=independent "
      "renormalize_real_after_null=False stage_timing={}\n",
      c.tokens, c.hidden, c.mlp_dim, c.experts, c.topk, dtype_name(c.dtype), name(c.backend),
      o.impls.size() > 1 ? "both" : name(o.impls.front()), c.shared_expert_dim, py_bool(c.shared_fused),
      name(c.bench_pass), queue, name(c.pack_strategy), name(c.permute_mode), name(c.remat_mode),
      name(c.capacity_policy), c.capacity_factor, py_bool(o.stage_timing));
}

// The dense GEMM ceiling: [T*K, H] x [H, 2M] in the run dtype through the same library, same process.
double measure_ceiling_tflops(const MoeConfig& c, int warmup, int iters) {
  const int64_t R = c.assignments(), Kd = c.hidden, N = 2 * c.mlp_dim;
  Tensor a(c.dtype, {R, Kd}), b(c.dtype, {Kd, N}), out(c.dtype, {R, N});
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, float((i * 7919) % 1000) * 1e-3f - 0.5f);
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, float((i * 104729) % 1000) * 1e-3f - 0.5f);
  TimingStats t = time_fn([&] { dense_gemm(out.raw(), c.dtype, a.raw(), c.dtype, b.raw(), c.dtype, R, Kd, N); },
                          warmup, std::max(iters, 3));
  return 2.0 * double(R) * double(Kd) * double(N) / t.mean / 1e12;
}

Status check_memory(const MoeConfig& c) {
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  const double need = c.estimated_bytes();
  if (need > 0.9 * physical)
    return Status::error(fmt::format("this shape needs about {:.1f} GiB but the machine has {:.1f} GiB of memory",
                                     need / 1073741824.0, physical / 1073741824.0));
  return Status::ok();
}

// Spec §9.4: each stage timed on its own (same warmup/iters); inputs of a stage come from one extra
// call of the previous stage. The shared expert is in no stage.
void print_stage_timing(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in, const Routing& routing,
                        MoeBlock& block) {
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
  fmt::print("[{}] pass=forward stage pack_s={:.6f}\n[{}] pass=forward stage up_s={:.6f}\n", dist, pack, dist, up);
  fmt::print("[{}] pass=forward stage down_s={:.6f}\n[{}] pass=forward stage combine_s={:.6f}\n", dist, down, dist,
             combine);
  fmt::print("[{}] pass=forward stage_pct pack={:.1f} up={:.1f} down={:.1f} combine={:.1f}\n", dist,
             100 * pack / total, 100 * up / total, 100 * down / total, 100 * combine / total);
}

struct RunOutcome {
  bool check_failed = false;
};

RunOutcome run_one(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in, const Routing& routing,
                   double ceiling_tflops, const std::string& dump_dir) {
  RunOutcome outcome;
  const std::string dist = name(c.distribution);
  const std::string impl = name(c.impl);
  const std::string pass = name(c.bench_pass);
  MoeBlock block(c, o.kernel);
  Tensor out(c.dtype, {c.tokens, c.hidden});
  std::optional<MoeGrads> grads;
  if (c.bench_pass == BenchPass::forward_backward) grads = make_grads(c);

  std::vector<std::string> results;
  for (QueueMode mode : o.queue_modes) {
    TimingStats t;
    if (c.bench_pass == BenchPass::forward_backward) {
      t = time_fn([&] { block.forward_backward(out, *grads, in, routing); }, o.warmup, o.iters);
    } else if (mode == QueueMode::prequeue) {
      block.prepare_dispatch(in, routing);
      t = time_fn([&] { block.forward_prepared(out, in, routing); }, o.warmup, o.iters);
    } else {
      t = time_fn([&] { block.forward(out, in, routing); }, o.warmup, o.iters);
    }
    const int64_t real = c.assignments();
    const double flops = seed_flops(c, real);
    const double tflops = flops / t.mean / 1e12;
    const double tps = double(c.tokens) / t.mean;
    const std::string head = fmt::format("[{}] mode={} pass={} topk={} impl={}", dist, name(mode), pass, c.topk, impl);
    fmt::print("{} backend={}\n{} remat_mode={}\n{} parallel_mode=none\n{} ep_comm_path=compact_psum\n", head,
               name(c.backend), head, name(c.remat_mode), head, head);
    fmt::print("{} time_s={:.6f}\n{} tflops={:.3f}\n{} tokens_per_s={:.2f}\n", head, t.mean, head, tflops, head, tps);
    results.push_back(fmt::format(
        "RESULT distribution={} mode={} pass={} impl={} backend={} topk={} null_target={:.3f} null_realized={:.3f} "
        "null_mode=independent null_assignments=0 real_assignments={} tflops={:.6f} tokens_per_s={:.6f} dtype={} "
        "time_s={:.6f} time_median_s={:.6f} time_min_s={:.6f} time_max_s={:.6f} ceiling_tflops={:.6f} "
        "pct_of_ceiling={:.2f} saved_activation_bytes={} threads={} remat_mode={} capacity_policy={} "
        "shared_expert_dim={} tokens={} hidden={} mlp_dim={} experts={}",
        dist, name(mode), pass, impl, name(c.backend), c.topk, 0.0, 0.0, real, tflops, tps, dtype_name(c.dtype),
        t.mean, t.median, t.min, t.max, ceiling_tflops, 100.0 * tflops / ceiling_tflops,
        block.saved_activation_bytes(), omp_get_max_threads(), name(c.remat_mode), name(c.capacity_policy),
        c.shared_expert_dim, c.tokens, c.hidden, c.mlp_dim, c.experts));
  }

  if (o.stage_timing) print_stage_timing(o, c, in, routing, block);

  RunStats rs = run_stats(routing);
  LoadStats ls = load_stats(routing);
  const std::string tag = fmt::format("[{}] topk={} impl={}", dist, c.topk, impl);
  fmt::print("{} run_stats runs={:.0f} mean={:.2f} p95={:.2f} max={:.0f}\n", tag, rs.runs, rs.mean, rs.p95, rs.max);
  fmt::print("{} load_stats min={:.0f} max={:.0f} std={:.2f} cv={:.4f}\n", tag, ls.min, ls.max, ls.std, ls.cv);
  const DispatchPlan& plan = block.plan();
  fmt::print("{} capacity policy={} factor={:.3f} cap={} dropped={} drop_frac={:.4f}\n", tag, name(c.capacity_policy),
             c.capacity_factor, c.capacity(), plan.dropped,
             double(plan.dropped) / double(std::max<int64_t>(1, c.assignments())));
  for (const std::string& line : results) fmt::print("{}\n", line);

  if (o.check) {
    CheckResult r = check_against_reference(c, in, routing, out, grads ? &*grads : nullptr);
    std::string grad_err = r.grad_rel_err < 0 ? "none" : fmt::format("{:.3e}", r.grad_rel_err);
    fmt::print("CHECK pass={} out_rel_err={:.3e} grad_rel_err={} tol={:.1e} distribution={} topk={} impl={} "
               "pass_kind={}\n",
               r.pass ? "true" : "false", r.out_rel_err, grad_err, r.tol, dist, c.topk, impl, pass);
    outcome.check_failed = !r.pass;
  }
  if (!dump_dir.empty()) {
    Status s = write_dump(dump_dir, c, fmt::format("{{\"kernel\": {}}}", o.kernel.to_json()), in, routing, out,
                          grads ? &*grads : nullptr);
    if (!s) {
      fmt::print(stderr, "moe-bench: error: {}\n", s.message());
      std::exit(2);
    }
  }
  std::fflush(stdout);
  return outcome;
}

int run(int argc, char** argv) {
  BenchOptions o;
  bool exit_ok = false;
  Status s = parse_options(argc, argv, o, exit_ok);
  if (!s) {
    fmt::print(stderr, "moe-bench: error: {}\n", s.message());
    return 2;
  }
  if (exit_ok) return 0;
  if (o.kernel.threads > 0) omp_set_num_threads(o.kernel.threads);

  MoeConfig c = o.base;
  for (int64_t k : o.topks) {
    c.topk = k;
    if (Status m = check_memory(c); !m) {
      fmt::print(stderr, "moe-bench: error: {}\n", m.message());
      return 2;
    }
  }
  const size_t n_runs = o.distributions.size() * o.topks.size() * o.impls.size();
  if (!o.dump_dir.empty() && n_runs > 1) {
    fmt::print(stderr, "moe-bench: error: --dump takes a single run (one distribution, topk and impl)\n");
    return 2;
  }

  print_shape_line(o);
  fmt::print(stderr, "moe-bench: {} threads, GEMM library: {}\n", omp_get_max_threads(), gemm_library_version());
  MoeInputs in = make_inputs(o.base);
  bool any_check_failed = false;
  for (Distribution dist : o.distributions) {
    for (int64_t k : o.topks) {
      c = o.base;
      c.distribution = dist;
      c.topk = k;
      Routing routing = make_routing(c);
      const double ceiling = measure_ceiling_tflops(c, o.warmup, o.iters);
      for (Impl impl : o.impls) {
        c.impl = impl;
        any_check_failed |= run_one(o, c, in, routing, ceiling, o.dump_dir).check_failed;
      }
    }
  }
  return any_check_failed ? 1 : 0;
}

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) { return moe::bench::run(argc, argv); }
