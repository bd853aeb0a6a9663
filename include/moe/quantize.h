// Symmetric int8 quantization, the seed's sym_int8 (spec §6): over each block of values,
//   scale = amax / 127 + FLT_MIN (float32),  q = clip(round_half_even(x / scale), -127, 127).
// A block of zeros gets scale FLT_MIN and q = 0 (no NaN, no Inf). Blocks: a row (per-token activations,
// per-row gradients), an expert's whole (Kd, N) weight slice (routed GEMMs), an output column over the
// contraction (the dense GEMMs of `int8`, AQT-like). -128 never occurs.
//
// Two implementations with one semantics and bitwise-equal results: the plain reference (moe::ref_quant,
// src/ref/quantize.cpp) and the cpu backend's (moe::cpu, src/cpu/ops/quantize.cpp: OpenMP, vectorised).
// Both divide in float32 (not a multiply by the reciprocal, which rounds differently at ties).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "moe/dtype.h"
#include "moe/grouped.h"
#include "moe/tensor.h"

namespace moe {

// A routed weight (E, Kd, N) quantized per expert (int8_routed_prequant quantizes once, outside the
// timed calls, as the seed does): q (E, Kd, N) s8, scale (E) f32, and qt (E, N, Kd) s8, the same values
// transposed, which the backward's data-gradient GEMM reads (the seed's swap(rhs_q, 1, 2)).
struct QuantizedWeight {
  Tensor q, qt, scale;
  bool empty() const { return q.empty(); }
};
// Quantizes w (one tensor, or the column concatenation of two parts) into a QuantizedWeight of host
// memory (the cpu backend's quantization: bitwise the reference's).
QuantizedWeight quantize_weight(ExpertWeights w, Dtype dt, int64_t E, int64_t Kd, int64_t N);

inline float quant_scale(float amax) {
  return amax / 127.0f + FLT_MIN;
}
inline int8_t quantize_value(float x, float scale) {
  const float q = std::nearbyint(x / scale);  // the default rounding mode: half to even
  return int8_t(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
}
inline float dequantize_value(int8_t q, float scale) {
  return float(q) * scale;
}

#define MOE_DECLARE_QUANTIZE(ns)                                                                           \
  namespace moe::ns {                                                                                      \
  /* Per row: x (rows, cols) f32/bf16, rows ld_x apart -> q (rows, cols), or (cols, rows) when             \
     transposed, and scale (rows). */                                                                      \
  void quantize_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t rows, int64_t cols,         \
                     int64_t ld_x, bool transposed = false);                                               \
  /* Per expert: w (E, Kd, N), or the column concatenation of two (E, Kd, N/2) parts -> q (E, Kd, N),      \
     or (E, N, Kd) when transposed, and scale (E) over each expert's whole slice. */                       \
  void quantize_experts(int8_t* q, float* scale, ExpertWeights w, Dtype dt, int64_t E, int64_t Kd,         \
                        int64_t N, bool transposed = false);                                               \
  /* Per output column: w (Kd, N) -> q (Kd, N) and scale (N), each over its column's Kd values. */         \
  void quantize_columns(int8_t* q, float* scale, const void* w, Dtype dt, int64_t Kd, int64_t N);          \
  /* Per token, then gathered (the seed's activation pre-quant): x (rows, cols) holds copies of token      \
     t's row at rows assignment_row[t * topk + k] (-1: none); the first is quantized per row and its       \
     values and scale copied to the others: q (rows, cols), scale (rows); other rows left alone. */        \
  void quantize_token_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t tokens, int64_t topk, \
                           int64_t cols, const int32_t* assignment_row);                                   \
  }

}  // namespace moe

MOE_DECLARE_QUANTIZE(ref_quant)
MOE_DECLARE_QUANTIZE(cpu)
