// swiglu.h's entry points: the passes of the best ISA level this CPU reaches (swiglu_isa.h), and the
// build's baseline instance of them.
#include "cpu/ops/swiglu.h"

#include <vector>

#include "cpu/gemm/isa_pick.h"
#include "cpu/ops/swiglu_isa.h"
#include "cpu/ops/swiglu_rows.h"

namespace moe::cpu {

MOE_DEFINE_SWIGLU_PASSES(baseline_swiglu_passes)

const SwigluPasses& swiglu_passes() {
  // Decided once, as the level (and MOE_MAX_ISA's cap) is read once per process.
  static const SwigluPasses chosen =
      best_passes_here(&baseline_swiglu_passes, &avx2_swiglu_passes, &avx512_bf16_swiglu_passes);
  return chosen;
}

void swiglu_forward(void* g, Dtype g_dt, GateUp in, Dtype dt, int64_t rows, int64_t M,
                    const float* row_weight) {
  swiglu_passes().forward(g, g_dt, in, dt, rows, M, row_weight);
}

void swiglu_forward_at(void* g, Dtype g_dt, GateUp in, Dtype dt, const int64_t* row_ids, int64_t count,
                       int64_t M, const float* row_weight) {
  swiglu_passes().forward_at(g, g_dt, in, dt, row_ids, count, M, row_weight);
}

void swiglu_forward_groups(void* g, Dtype g_dt, GateUp in, Dtype dt, GroupedShape groups, int64_t M,
                           const float* row_weight) {
  const int64_t rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
  if (!groups.padding_kept || !groups.live_rows) {
    swiglu_forward(g, g_dt, in, dt, rows, M, row_weight);
    return;
  }
  std::vector<int64_t> live;  // a forward's few hundred rows: the list costs nothing next to the pass
  live.reserve(size_t(rows));
  for (int64_t e = 0; e < groups.experts; ++e)
    for (int64_t r = 0; r < groups.live_rows[e]; ++r) live.push_back(groups.group_offset[e] + r);
  swiglu_forward_at(g, g_dt, in, dt, live.data(), int64_t(live.size()), M, row_weight);
}

void swiglu_forward_quantized(void* g, Dtype g_dt, int8_t* gq, float* g_scale, GateUp in, Dtype dt,
                              int64_t rows, int64_t M, const float* row_weight) {
  swiglu_passes().forward_quantized(g, g_dt, gq, g_scale, in, dt, rows, M, row_weight);
}

void swiglu_backward(GateUpGrad out, Dtype out_dt, const void* dg, GateUp in, Dtype dt, int64_t rows,
                     int64_t M, const float* row_weight) {
  swiglu_passes().backward(out, out_dt, dg, in, dt, rows, M, row_weight);
}

}  // namespace moe::cpu
