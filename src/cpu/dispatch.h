// Dispatch (spec §3.2): gather token rows into the expert-major row buffer of a DispatchPlan, and the
// backward scatter-add of row gradients into dx. Padding rows (row_assignment -1) are written as zeros.
#pragma once

#include <cstdint>

#include "moe/config.h"
#include "moe/pack.h"

namespace moe::cpu {

// direct_take: x_rows[r] = x[token(r)].
void dispatch_gather_direct(void* x_rows, const void* x, Dtype dt, const DispatchPlan& plan, int64_t H);
// x_rows (rows, H), x (T, H)

// repeat_sort: x_rep = repeat(x, K) is materialised (A, H), then x_rows[r] = x_rep[row_assignment[r]].
// Twice the traffic of direct_take; kept because the seed A/B-tests it.
void dispatch_gather_repeat(void* x_rows, void* x_rep, const void* x, Dtype dt, const DispatchPlan& plan, int64_t H);
// x_rows (rows, H), x_rep (A, H) scratch, x (T, H)

// dx[t] += sum_k dx_rows[assignment_row[t*K + k]]  (the gather's backward, done per token so it is
// deterministic and race-free).
void dispatch_backward(float* dx, const void* dx_rows, Dtype dt, const DispatchPlan& plan, int64_t H);
// dx (T, H) f32 accumulated in place, dx_rows (rows, H)

}  // namespace moe::cpu
