#include <algorithm>

#include "moe/backend.h"
#include "moe/ops.h"
#include "moe/pack.h"

namespace moe {
namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

int64_t layout_tile_rows(GemmBackend backend, int64_t gmm_tile_rows) {
  switch (backend) {
    case GemmBackend::gmm:
      return gmm_tile_rows;
    case GemmBackend::ragged_dot:
      return 1;
  }
  MOE_CHECK(false, "unknown grouped GEMM backend");
}

int64_t layout_tile_rows(const MoeConfig& cfg, int64_t gmm_tile_rows) {
  return cfg.impl == Impl::ref_dp ? kRefDpBlockRows : layout_tile_rows(cfg.gemm_backend, gmm_tile_rows);
}

int64_t ref_dp_blocks(const MoeConfig& cfg) {
  return (cfg.assignments() + cfg.experts * kRefDpBlockRows + kRefDpBlockRows - 1) / kRefDpBlockRows;
}

int64_t max_plan_rows(const MoeConfig& cfg, int64_t tile_rows) {
  MOE_CHECK(tile_rows >= 1, "max_plan_rows: tile_rows must be >= 1");
  const int64_t A = cfg.assignments(), E = cfg.experts;
  if (cfg.impl == Impl::ref_dp) {
    MOE_CHECK(tile_rows == kRefDpBlockRows, "max_plan_rows: ref_dp's plan is laid out in 256-row blocks");
    return ref_dp_blocks(cfg) * kRefDpBlockRows;  // >= A + min(E, A) * 255: every group fits
  }
  if (cfg.capacity_active() && cfg.capacity_policy == CapacityPolicy::pad)
    return E * round_up(cfg.capacity(), tile_rows);
  return A + std::min(E, A) * (tile_rows - 1);
}

DispatchPlan allocate_plan(const MoeConfig& cfg, int64_t tile_rows, MemorySpace& memory) {
  DispatchPlan plan;
  plan.tokens = cfg.tokens;
  plan.topk = cfg.topk;
  plan.experts = cfg.experts;
  plan.max_rows = max_plan_rows(cfg, tile_rows);
  plan.group_offset = Tensor(Dtype::s64, {cfg.experts + 1}, memory);
  plan.group_live = Tensor(Dtype::s64, {cfg.experts}, memory);
  plan.row_assignment = Tensor(Dtype::s32, {plan.max_rows}, memory);
  plan.row_weight = Tensor(Dtype::f32, {plan.max_rows}, memory);
  plan.assignment_row = Tensor(Dtype::s32, {cfg.assignments()}, memory);
  plan.stats = Tensor(Dtype::s64, {3}, memory);
  return plan;
}

DispatchPlan to_memory(const DispatchPlan& plan, MemorySpace& memory) {
  DispatchPlan p = plan;
  for (Tensor* t :
       {&p.group_offset, &p.group_live, &p.row_assignment, &p.row_weight, &p.assignment_row, &p.stats})
    *t = t->to_memory(memory);
  return p;
}

PlanStats plan_stats(const DispatchPlan& plan) {
  const Tensor host = plan.stats.to_host();
  const int64_t* s = host.data<int64_t>();
  return PlanStats{s[0], s[1], s[2]};
}

HostPlan host_view(const DispatchPlan& plan) {
  const int64_t* offsets = plan.group_offset.data<int64_t>();
  return HostPlan{plan.tokens,
                  plan.topk,
                  plan.experts,
                  offsets[plan.experts],
                  offsets,
                  plan.group_live.data<int64_t>(),
                  plan.row_assignment.data<int32_t>(),
                  plan.row_weight.data<float>(),
                  plan.assignment_row.data<int32_t>()};
}

ExpertActivations::ExpertActivations(const OpContext& ctx, bool with_gradients) {
  const int64_t max_rows = max_plan_rows(ctx.cfg, ctx.tile_rows), M = ctx.cfg.mlp_dim;
  const Dtype dt = ctx.cfg.dtype;
  h = ctx.backend.empty(dt, {max_rows, 2 * M});
  g = ctx.backend.empty(dt, {max_rows, M});
  if (!with_gradients) return;
  dh = ctx.backend.empty(dt, {max_rows, 2 * M});
  dg = ctx.backend.empty(dt, {max_rows, M});
}

}  // namespace moe
