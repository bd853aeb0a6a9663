// SwiGLU (spec §3.4): g = silu(a) * b, optionally pre-multiplied by the row's routing weight, and its
// backward. a and b are the gate and up halves; they live either in one fused row buffer
// h (rows, 2M) (a = h, b = h + M, ld = 2M) or in two separate buffers (ld = M). Rows are processed
// in float; storage is the run dtype. Used for the routed rows and (in f32) for the shared expert.
// Compiled per ISA level (swiglu_isa.h); these run the best one this CPU has.
#pragma once

#include <cstdint>

#include "moe/dtype.h"
#include "moe/grouped.h"

namespace moe::cpu {

struct GateUp {
  const void* a;  // gate (rows, ld) view, first M columns used
  const void* b;  // up   (rows, ld) view
  int64_t ld;     // row stride in elements
};

struct GateUpGrad {
  void* da;  // (rows, ld) view
  void* db;  // (rows, ld) view
  int64_t ld;
};

// g (rows, M) in g_dt = silu(a) * b * (row_weight ? row_weight[r] : 1), a and b in in_dt.
void swiglu_forward(void* g, Dtype g_dt, GateUp in, Dtype in_dt, int64_t rows, int64_t M,
                    const float* row_weight);
// row_weight (rows) or nullptr

// swiglu_forward over rows row_ids[0, count) only (the rest of g left as it is).
void swiglu_forward_at(void* g, Dtype g_dt, GateUp in, Dtype in_dt, const int64_t* row_ids, int64_t count,
                       int64_t M, const float* row_weight);

// swiglu_forward over the live rows of every group (moe/grouped.h), or, unless groups.padding_kept, over all
// of them (the padding rows' zeros give g's padding as zeros): one pass, whatever the groups.
void swiglu_forward_groups(void* g, Dtype g_dt, GateUp in, Dtype in_dt, GroupedShape groups, int64_t M,
                           const float* row_weight);

// swiglu_forward, and each row of g as stored quantized per row in the same pass (the int8 modes' next
// GEMM input; bitwise quantize_rows(g)): gq (rows, M) s8, g_scale (rows).
void swiglu_forward_quantized(void* g, Dtype g_dt, int8_t* gq, float* g_scale, GateUp in, Dtype in_dt,
                              int64_t rows, int64_t M, const float* row_weight);

// Given dg = dL/dg (rows, M) of the forward above (in in_dt, like a and b): da = dg*w * b * silu'(a),
// db = dg*w * silu(a), written in out_dt.
void swiglu_backward(GateUpGrad out, Dtype out_dt, const void* dg, GateUp in, Dtype in_dt, int64_t rows,
                     int64_t M, const float* row_weight);

}  // namespace moe::cpu
