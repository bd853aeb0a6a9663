// SwiGLU's element-wise forward and backward on the GPU, shared by the expert FFN and the shared
// expert. h (rows, 2M) holds [gate a | up b] per row. Rows whose row_assignment is negative (padding)
// are written as zeros; row_assignment and row_weight are null for the shared expert (every row
// live, weight 1). Reference: src/ref/expert_ffn.cpp, src/ref/shared_expert.cpp.
#pragma once

#include <cstdint>

#include "moe/tensor.h"

namespace moe::cuda {

struct RowsOf {
  int64_t rows;                   // rows computed, [0, rows)
  const int32_t* row_assignment;  // (rows) or null: every row live
  const float* row_weight;        // (rows) or null: weight 1
};

// g (rows, M) = silu(a) * b * weight.
void swiglu_forward(Tensor& g, const Tensor& h, int64_t M, const RowsOf& rows);
// dh (rows, 2M) = [dg * w * b * silu'(a) | dg * w * silu(a)]; dg (rows, M).
void swiglu_backward(Tensor& dh, const Tensor& dg, const Tensor& h, int64_t M, const RowsOf& rows);

}  // namespace moe::cuda
