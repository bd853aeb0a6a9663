// One row's part of moe/quantize.h on the cpu backend, shared by quantize.cpp and the SwiGLU pass that
// quantizes the rows it makes (swiglu_rows.h, compiled per ISA level): inline functions in vec_math.h's
// namespace of the including file's ISA, so each file keeps its own copies. Bitwise equal to the
// reference: the same float32 division, and round half to even by the 1.5 * 2^23 addition (exact for
// |v| < 2^22; here |v| <= 127), which every SSE level vectorises (nearbyint needs SSE4.1). amax is a max
// over the values' bit patterns with the sign cleared: for finite floats the order of the patterns is
// the order of the magnitudes, and an integer max vectorises without -ffast-math. Files including this
// are compiled with -fno-trapping-math (CMakeLists.txt: the clamps' compares stay vectorised).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/ops/vec_math.h"
#include "moe/dtype.h"
#include "moe/quantize.h"

namespace moe::cpu {
inline namespace MOE_VEC_ISA {

constexpr float kRoundingShift = 12582912.0f;  // 1.5 * 2^23

// max |x[i]| over n values from `first` (f32, bf16 or f16), from the magnitudes' bits (which order as
// the values do).
inline float amax_of(const void* x, Dtype dt, int64_t first, int64_t n) {
  uint32_t most = 0;
  if (dt == Dtype::f32) {
    const float* p = static_cast<const float*>(x) + first;
#pragma omp simd reduction(max : most)
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, 4);
      most = std::max(most, bits & 0x7fffffffu);
    }
  } else if (dt == Dtype::f16) {
    const f16_t* p = static_cast<const f16_t*>(x) + first;
#pragma omp simd reduction(max : most)
    for (int64_t i = 0; i < n; ++i) most = std::max(most, uint32_t(p[i].bits & 0x7fffu));
    return moe::f16_to_f32(f16_t{uint16_t(most)});
  } else {
    const bf16_t* p = static_cast<const bf16_t*>(x) + first;
#pragma omp simd reduction(max : most)
    for (int64_t i = 0; i < n; ++i) most = std::max(most, (uint32_t(p[i]) << 16) & 0x7fffffffu);
  }
  float f;
  std::memcpy(&f, &most, 4);
  return f;
}

// q[i * q_stride] = quantized p[i] for n values.
template <typename In>
inline void quantize_values(int8_t* q, int64_t q_stride, const In* p, int64_t n, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp((widen(p[i]) / scale + kRoundingShift) - kRoundingShift, -127.0f, 127.0f);
    q[i * q_stride] = int8_t(v);
  }
}

// q[i * q_stride] = quantized x[first + i] for n values.
inline void quantize_run(int8_t* q, int64_t q_stride, const void* x, Dtype dt, int64_t first, int64_t n,
                         float scale) {
  if (dt == Dtype::f32)
    quantize_values(q, q_stride, static_cast<const float*>(x) + first, n, scale);
  else if (dt == Dtype::f16)
    quantize_values(q, q_stride, static_cast<const f16_t*>(x) + first, n, scale);
  else
    quantize_values(q, q_stride, static_cast<const bf16_t*>(x) + first, n, scale);
}

// q[0, n) = x[first, first + n) quantized as one block (a row); returns its scale.
inline float quantize_block(int8_t* q, const void* x, Dtype dt, int64_t first, int64_t n) {
  const float scale = quant_scale(amax_of(x, dt, first, n));
  quantize_run(q, 1, x, dt, first, n, scale);
  return scale;
}

}  // namespace MOE_VEC_ISA
}  // namespace moe::cpu
