#include "bench/harness/seed_lines.h"

#include <fmt/format.h>

#include <cmath>

#include "moe/python_repr.h"

namespace moe::bench {

std::string devices_line(const std::vector<std::string>& device_reprs) {
  std::string list;
  for (const std::string& d : device_reprs) list += (list.empty() ? "" : ", ") + d;
  return "devices=[" + list + "]";
}

std::vector<std::string> world_devices(const std::string& own_repr, int ranks) {
  std::vector<std::string> reprs;
  const size_t id = own_repr.find("(id=0)");
  for (int r = 0; r < ranks; ++r)
    reprs.push_back(id == std::string::npos || ranks == 1
                        ? own_repr
                        : own_repr.substr(0, id) + fmt::format("(id={})", r) + own_repr.substr(id + 6));
  return reprs;
}

std::string shape_line(const BenchOptions& o) {
  const MoeConfig& c = o.base;
  return fmt::format(
      "shape tokens={} hidden={} mlp_dim={} experts={} topk={} dtype={} backend={} impl={} "
      "shared_expert_dim={} shared_fused={} bench_pass={} parallel_mode={} ep_comm_path={}{} "
      "queue_mode={} routing_pack_strategy={} dispatch_permute_mode={} use_custom_sort_vjp={} remat_mode={} "
      "capacity_policy={} capacity_factor={} null_route_frac={} null_experts={} null_routing_mode={} "
      "renormalize_real_after_null={} stage_timing={}",
      c.tokens, c.hidden, c.mlp_dim, c.experts, o.topk_flag, dtype_name(c.dtype), name(c.gemm_backend),
      o.impls.size() > 1 ? "both" : name(o.impls.front()), c.shared_expert_dim, python_bool(c.shared_fused),
      name(c.bench_pass), name(c.parallel_mode), name(c.ep_comm_path),
      o.quant_mode_given ? fmt::format(" quant_mode={}", name(c.quant_mode)) : "", o.queue_mode_flag,
      name(c.pack_strategy), name(c.permute_mode), python_bool(c.use_custom_sort_vjp), name(c.remat_mode),
      name(c.capacity_policy), python_float(c.capacity_factor), python_float(c.null_routing.frac),
      c.null_routing.null_experts, name(c.null_routing.mode), python_bool(c.null_routing.renormalize),
      python_bool(o.stage_timing));
}

std::string trace_run_dir(const BenchOptions& o, const MoeConfig& c, int64_t time_ns) {
  std::string dir = o.trace_dir;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();  // Python's rstrip('/')
  return fmt::format("{}/{}_{}_topk{}_{}_null{:.2f}_{}_{}_{}_{}", dir, time_ns, name(c.distribution), c.topk,
                     name(c.impl), c.null_routing.frac, name(c.parallel_mode), name(c.ep_comm_path),
                     name(c.bench_pass), o.queue_mode_flag);
}

std::string mode_lines(const MoeConfig& c, std::string_view mode, double time_s, double tflops,
                       double tokens_per_s, bool quant_mode_line) {
  const std::string head = fmt::format("[{}] mode={} pass={} topk={} impl={}", name(c.distribution), mode,
                                       name(c.bench_pass), c.topk, name(c.impl));
  return fmt::format(
      "{0} backend={1}\n{8}{0} remat_mode={2}\n{0} parallel_mode={6}\n{0} ep_comm_path={7}\n"
      "{0} time_s={3:.6f}\n{0} tflops={4:.3f}\n{0} tokens_per_s={5:.2f}\n",
      head, name(c.gemm_backend), name(c.remat_mode), time_s, tflops, tokens_per_s, name(c.parallel_mode),
      name(c.ep_comm_path),
      quant_mode_line ? fmt::format("{} quant_mode={}\n", head, name(c.quant_mode)) : std::string());
}

std::string routing_lines(const MoeConfig& c, const Routing& routing, const NullRoutingStats& null_stats) {
  const RunStats rs = run_stats(routing);
  const LoadStats ls = load_stats(routing);
  // Spec §2.4: the printed cap ignores the policy; drops are counted only when a policy applies.
  const int64_t A = c.assignments();
  const int64_t cap =
      c.capacity_factor > 0 ? int64_t(std::ceil(c.capacity_factor * double(A) / double(c.experts))) : 0;
  int64_t dropped = 0;
  if (c.capacity_policy != CapacityPolicy::none && cap > 0)
    for (int64_t n : expert_counts(routing)) dropped += std::max<int64_t>(0, n - cap);
  const std::string tag = fmt::format("[{}] topk={} impl={}", name(c.distribution), c.topk, name(c.impl));
  return fmt::format(
      "{0} run_stats runs={1:.0f} mean={2:.2f} p95={3:.2f} max={4:.0f}\n"
      "{0} load_stats min={5:.0f} max={6:.0f} std={7:.2f} cv={8:.4f}\n"
      "{0} capacity policy={9} factor={10:.3f} cap={11} dropped={12} drop_frac={13:.4f}\n"
      "{0} null_route mode={14} target={15:.3f} realized={16:.3f} null_experts={17} null_assignments={18} "
      "real_assignments={19}\n",
      tag, rs.runs, rs.mean, rs.p95, rs.max, ls.min, ls.max, ls.std, ls.cv, name(c.capacity_policy),
      c.capacity_factor, cap, dropped, double(dropped) / double(std::max<int64_t>(1, A)),
      name(c.null_routing.mode), null_stats.target, null_stats.realized, null_stats.null_experts,
      null_stats.null_assignments, null_stats.real_assignments);
}

std::string stage_lines(const MoeConfig& c, double pack_s, double up_s, double down_s, double combine_s) {
  const double total = pack_s + up_s + down_s + combine_s;
  return fmt::format(
      "[{0}] pass=forward stage pack_s={1:.6f}\n[{0}] pass=forward stage up_s={2:.6f}\n"
      "[{0}] pass=forward stage down_s={3:.6f}\n[{0}] pass=forward stage combine_s={4:.6f}\n"
      "[{0}] pass=forward stage_pct pack={5:.1f} up={6:.1f} down={7:.1f} combine={8:.1f}\n",
      name(c.distribution), pack_s, up_s, down_s, combine_s, 100 * pack_s / total, 100 * up_s / total,
      100 * down_s / total, 100 * combine_s / total);
}

std::string quant_stage_line(const MoeConfig& c, double quantize_weights_s, double quantize_rows_s,
                             double up_down_s) {
  return fmt::format(
      "[{0}] pass=forward stage quant quantize_weights_s={1:.6f} quantize_rows_s={2:.6f} "
      "pct_of_up_down weights={3:.1f} rows={4:.1f}\n",
      name(c.distribution), quantize_weights_s, quantize_rows_s, 100 * quantize_weights_s / up_down_s,
      100 * quantize_rows_s / up_down_s);
}

}  // namespace moe::bench
