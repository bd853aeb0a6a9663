// Pack (spec §3.1): sort the A = T*K assignments by expert, stably (ties keep flat order a = t*K + k),
// and build the dispatch plan: the expert-major row buffer the grouped GEMMs consume.
// Null ids (>= E, issue 4) sort to the tail and never enter a group.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/config.h"
#include "moe/routing.h"

namespace moe {

struct Packed {
  std::vector<int32_t> sort_idx;        // (A) flat assignment index, stable by-expert order
  std::vector<int32_t> token_idx_sort;  // (A) = sort_idx / K
  std::vector<int32_t> group_sizes;     // (E) real assignments per expert (null ids dropped)
};

// All strategies yield the identical permutation through different algorithms:
//  argsort           stable comparison sort of indices keyed by expert id
//  tuple_sort        unstable sort of packed (expert, a) 64-bit tuples (unique keys, so stable result)
//  expert_score_sort counting sort (histogram, exclusive scan, stable scatter) of (expert, score, a) records
void pack_assignments(Packed& out, const Routing& routing, PackStrategy strategy);

// Token layouts (docs/design.md): "exact/ragged" puts group e at the exact prefix sum of group sizes;
// "contiguous" pads every group up to a multiple of the GEMM tile. Capacity `pad` gives each expert
// exactly `cap` slots; capacity `drop` keeps shapes and turns rows ranked >= cap into padding rows.
// A padding row has row_assignment == -1: its x row is zero, its weight 0, its GEMM output is computed
// (zero in, zero out) but never combined.
struct DispatchPlan {
  int64_t tokens = 0, topk = 0, experts = 0;
  int64_t rows = 0;                     // buffer rows = group_offset[E]
  std::vector<int64_t> group_offset;    // (E+1) group e occupies rows [group_offset[e], group_offset[e+1])
  std::vector<int32_t> row_assignment;  // (rows) flat assignment a of each row, -1 for padding
  std::vector<float> row_weight;        // (rows) combine weight (rounded to the run dtype), 0 for padding
  std::vector<int32_t> assignment_row;  // (A) buffer row of assignment a, -1 if dropped or null
  int64_t live_rows = 0;                // rows with row_assignment >= 0
  int64_t dropped = 0;                  // assignments removed by capacity

  int64_t group_rows(int64_t e) const { return group_offset[size_t(e) + 1] - group_offset[size_t(e)]; }
  int32_t row_token(int64_t r) const {
    int32_t a = row_assignment[size_t(r)];
    return a < 0 ? -1 : int32_t(a / topk);
  }
};

// tile_rows: the contiguous layout's group alignment (1 = exact/ragged layout).
void build_dispatch_plan(DispatchPlan& plan, const Packed& packed, const Routing& routing,
                         const MoeConfig& cfg, int64_t tile_rows);

// The layout a backend takes: gmm -> contiguous (tile_rows = KernelConfig::gmm_tile_rows), ragged_dot ->
// exact.
int64_t layout_tile_rows(BackendKind backend, int64_t gmm_tile_rows);

}  // namespace moe
