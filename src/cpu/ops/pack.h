// Pack on the CPU (spec §3.1): sort the A = T*K assignments by expert, stably, three ways, and lay
// the sorted assignments out as the dispatch plan (moe/pack.h). Null ids (>= E, issue 4) sort to the
// tail and never enter a group. Reference: src/ref/pack.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/config.h"
#include "moe/ops.h"
#include "moe/pack.h"
#include "moe/routing.h"

namespace moe::cpu {

struct Packed {
  std::vector<int32_t> sort_idx;     // (A) flat assignment index, stable by-expert order
  std::vector<int32_t> group_sizes;  // (E) real assignments per expert (null ids dropped)
};

// All strategies yield the identical permutation through different algorithms:
//  argsort           stable comparison sort of indices keyed by expert id
//  tuple_sort        unstable sort of packed (expert, a) 64-bit tuples (unique keys, so stable result)
//  expert_score_sort counting sort (histogram, exclusive scan, stable scatter) of (expert, score, a) records
void pack_assignments(Packed& out, const RoutingView& routing, PackStrategy strategy);

// Writes `plan` (host memory, allocated for cfg) from the sorted assignments. tile_rows: the
// contiguous layout's group alignment (1 = exact/ragged layout). cfg supplies the capacity rule and
// the run dtype (row weights are rounded to it, as the seed casts its sorted weights to x.dtype).
void build_dispatch_plan(DispatchPlan& plan, const Packed& packed, const RoutingView& routing,
                         const MoeConfig& cfg, int64_t tile_rows);

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx);

}  // namespace moe::cpu
