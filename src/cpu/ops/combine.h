// Combine on the CPU (spec §3.5): bring the expert output rows back to their tokens, weighted by the
// routing weights, accumulating in f32 (the seed's scatter accumulates in the activation dtype; we do
// not copy that precision loss, see docs/design.md). Two genuinely different algorithms, as in the seed:
//  scatter: walk the rows in buffer (expert) order and add each into its token; threads own disjoint
//           column slices of H so the adds never race and the result is deterministic.
//  unsort:  per token, gather its K rows through assignment_row (the inverse permutation) and sum.
// Weights: scatter uses the plan's row weights (rounded to the run dtype, like the seed's sorted_w);
// unsort uses the f32 routing weights. With preweight the rows already carry the weight.
// Reference: src/ref/combine.cpp.
#pragma once

#include <cstdint>
#include <memory>

#include "moe/ops.h"
#include "moe/pack.h"
#include "moe/routing.h"

namespace moe::cpu {

enum class CombineKind { scatter, unsort };
CombineKind combine_kind(const MoeConfig& cfg);

// sums.out = start + (row_weight ? row_weight[r] : 1) * rows[r] added into token(r) over the live rows,
// in buffer order, accumulating in sums.acc (then converted into sums.out unless it is acc).
// Shared by the scatter combine and the dispatch's scatter-add backward.
void add_rows_to_tokens(const TokenSums& sums, const void* rows, Dtype dt, const HostPlan& plan, int64_t H,
                        const float* row_weight);
// rows (rows, H), row_weight (rows) or nullptr

// sums.out[t] = start[t] + sum over k of (weight ? weight[t*K+k] : 1) * rows[assignment_row[t*K+k]]
// (live rows only), summed per token in registers and written once in sums.out's dtype.
// Shared by the unsort combine and the dispatch's gather backward.
void gather_rows_to_tokens(const TokenSums& sums, const void* rows, Dtype dt, const HostPlan& plan, int64_t H,
                           const float* weight);
// rows (rows, H), weight (T, K) or nullptr

// dy_rows[r] = weight(r) * dy[token(r)] (weight 1 when preweighted); padding rows get zeros.
// The backward of both algorithms is this gather (the transpose of a scatter-add is a gather).
void combine_backward(void* dy_rows, Dtype dt, const float* dy, const HostPlan& plan,
                      const RoutingView& routing, int64_t H, CombineKind kind, bool preweighted);
// dy_rows (rows, H), dy (T, H) f32

std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx);

}  // namespace moe::cpu
