// The dispatch plan: the one description of the expert-major row buffer that every stage after pack
// reads. The pack op (moe/ops.h) writes it from the routing: assignments sorted stably by expert
// (ties keep the flat order a = t*K + k, spec §3.1), null ids (>= E) dropped.
//
// Token layouts (docs/design.md): "exact/ragged" puts group e at the exact prefix sum of group sizes;
// "contiguous" pads every group up to a multiple of the GEMM tile. Capacity `pad` gives each expert
// exactly `cap` slots; capacity `drop` keeps shapes and turns rows ranked >= cap into padding rows.
// A padding row has row_assignment == -1: its x row is zero, its weight 0, and its outputs are zeros,
// never combined. Padding is always a group's tail, so each group is a prefix of live rows
// (group_live) then padding: the GEMMs multiply the live rows only and write the padding as zeros.
//
// The plan's tensors live in the backend's memory and are sized for the worst routing of the config
// (max_plan_rows), so a device backend never allocates while timing and never needs the routing on
// the host; only rows below group_offset[E] are meaningful.
#pragma once

#include <cstdint>

#include "moe/config.h"
#include "moe/tensor.h"

namespace moe {

struct PlanStats {
  int64_t rows = 0;       // buffer rows in use = group_offset[E]
  int64_t live_rows = 0;  // rows with row_assignment >= 0
  int64_t dropped = 0;    // assignments removed by capacity
};

struct DispatchPlan {
  int64_t tokens = 0, topk = 0, experts = 0;
  int64_t max_rows = 0;   // rows every row buffer is sized for
  Tensor group_offset;    // (E+1)     s64  group e occupies rows [group_offset[e], group_offset[e+1])
  Tensor group_live;      // (E)       s64  its first group_live[e] rows hold assignments; the rest pad
  Tensor row_assignment;  // (max_rows) s32 flat assignment a of each row, -1 for padding
  Tensor row_weight;      // (max_rows) f32 combine weight (rounded to the run dtype), 0 for padding
  Tensor assignment_row;  // (A)       s32  buffer row of assignment a, -1 if dropped or null
  Tensor stats;           // (3)       s64  rows, live_rows, dropped (PlanStats)
};

// The contiguous layout's group alignment for a config: gmm -> KernelConfig::gmm_tile_rows,
// ragged_dot -> 1 (exact).
int64_t layout_tile_rows(GemmBackend backend, int64_t gmm_tile_rows);
// The tile of a config's plan: impl ref_dp's block (kRefDpBlockRows, the seed's block_b), else the
// layout's above.
int64_t layout_tile_rows(const MoeConfig& cfg, int64_t gmm_tile_rows);

// impl ref_dp (spec §5.5): every expert group padded to a multiple of 256 rows, in a buffer of a static
// ref_dp_blocks(cfg) = ceil((A + E * 256) / 256) blocks whatever the routing (JAX's static shapes): the
// blocks past the last group are multiplied too, on zero rows.
inline constexpr int64_t kRefDpBlockRows = 256;
int64_t ref_dp_blocks(const MoeConfig& cfg);

// The most rows any routing of `cfg` can need at `tile_rows`: every assignment live plus the tile
// padding of at most min(E, A) non-empty groups, or E tile-padded capacity slots under `pad`; ref_dp's
// static blocks.
int64_t max_plan_rows(const MoeConfig& cfg, int64_t tile_rows);

// Allocates (does not fill) a plan for `cfg` in `memory`.
DispatchPlan allocate_plan(const MoeConfig& cfg, int64_t tile_rows, MemorySpace& memory);

// The plan in `memory` (shared, not copied, where it already is).
DispatchPlan to_memory(const DispatchPlan& plan, MemorySpace& memory);

// Reads the plan's stats through the host (a copy from device memory).
PlanStats plan_stats(const DispatchPlan& plan);

// The plan as host arrays, for the kernels of host backends. REQUIRES: the plan is in host memory.
struct HostPlan {
  int64_t tokens, topk, experts;
  int64_t rows;                   // group_offset[E]
  const int64_t* group_offset;    // (E+1)
  const int64_t* group_live;      // (E)
  const int32_t* row_assignment;  // (rows)
  const float* row_weight;        // (rows)
  const int32_t* assignment_row;  // (A)

  int64_t group_rows(int64_t e) const { return group_offset[e + 1] - group_offset[e]; }
  int32_t row_token(int64_t r) const {
    const int32_t a = row_assignment[r];
    return a < 0 ? -1 : int32_t(a / topk);
  }
};
HostPlan host_view(const DispatchPlan& plan);

}  // namespace moe
