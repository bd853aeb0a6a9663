// Dispatch on the CPU (spec §3.2): gather token rows into the expert-major row buffer of a dispatch
// plan, and the backward sum of row gradients into dx. Padding rows (row_assignment -1) are written
// as zeros. Reference: src/ref/dispatch.cpp.
#pragma once

#include <cstdint>
#include <memory>

#include "moe/ops.h"
#include "moe/pack.h"

namespace moe::cpu {

// direct_take: x_rows[r] = x[token(r)], padding rows zeros (left as they are with padding_kept: the caller
// keeps them zeros, cpu/ops/kept_zero_padding.h).
void dispatch_gather_direct(void* x_rows, const void* x, Dtype dt, const HostPlan& plan, int64_t H,
                            bool padding_kept = false);
// x_rows (rows, H), x (T, H)

// repeat_sort: x_rep = repeat(x, K) is materialised (A, H), then x_rows[r] = x_rep[row_assignment[r]].
// Twice the traffic of direct_take; kept because the seed A/B-tests it.
void dispatch_gather_repeat(void* x_rows, void* x_rep, const void* x, Dtype dt, const HostPlan& plan,
                            int64_t H, bool padding_kept = false);
// x_rows (rows, H), x_rep (A, H) scratch, x (T, H)

// The gather's backward, dx[t] += sum of the row gradients of token t, two ways (the seed A/B-tests
// them through --use-custom-sort-vjp):
//  scatter: walk rows in buffer order and add each into its token (autodiff's scatter-add); threads
//           own disjoint column slices, so it is race-free and deterministic.
//  gather:  per token, gather its K rows through assignment_row (the inverse permutation).
enum class DispatchBackwardKind { scatter, gather };
DispatchBackwardKind dispatch_backward_kind(const MoeConfig& cfg);
void dispatch_backward(const TokenSums& dx, const void* dx_rows, Dtype dt, const HostPlan& plan, int64_t H,
                       DispatchBackwardKind kind);
// dx.out (T, H) = start + each token's rows, dx_rows (rows, H)

std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx);

}  // namespace moe::cpu
