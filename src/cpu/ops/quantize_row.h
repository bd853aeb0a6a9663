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

// q[i * q_stride] = quantized p[i] for n values, by the reference's division.
template <typename In>
inline void quantize_divided(int8_t* q, int64_t q_stride, const In* p, int64_t n, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp((widen(p[i]) / scale + kRoundingShift) - kRoundingShift, -127.0f, 127.0f);
    q[i * q_stride] = int8_t(v);
  }
}

#if defined(MOE_VEC_AVX2)
// A product by the scale's reciprocal and the quotient the reference rounds differ by less than 2^-14 where
// the product is below 256 (each is within 2^-15 of v / scale), so a product farther than this from every
// half step rounds to the quotient's integer.
constexpr float kHalfStepMargin = 1.0f / 8192;  // 2^-13

// q[j * q_stride] = bytes[j] for the first `count` (8 or 16) bytes of a vector.
inline void store_bytes(int8_t* q, int64_t q_stride, __m128i bytes, int count) {
  if (q_stride == 1 && count == 16) return _mm_storeu_si128(reinterpret_cast<__m128i*>(q), bytes);
  if (q_stride == 1 && count == 8) return _mm_storel_epi64(reinterpret_cast<__m128i*>(q), bytes);
  alignas(16) int8_t b[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(b), bytes);
  for (int j = 0; j < count; ++j) q[j * q_stride] = b[j];
}
#endif

#if defined(MOE_VEC_AVX512F)
// 16 stored values as float. The intrinsics' masked forms (all lanes): GCC 12 warns on the unmasked ones'
// undefined source.
constexpr __mmask16 kAllLanes = 0xffff;
inline __m512 load16_as_f32(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load16_as_f32(const bf16_t* p) {
  return bf16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));  // vec_math.h's
}
inline __m512 load16_as_f32(const f16_t* p) {
  return _mm512_maskz_cvtph_ps(kAllLanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// q[i * q_stride] = quantized p[i] for 16 values by the scale's reciprocal, where each is an integer's away
// from a half step (then bitwise quantize_divided); returns whether it wrote them.
template <typename In>
inline bool quantize_vector_by_reciprocal(int8_t* q, int64_t q_stride, const In* p, float inverse_scale) {
  const __m512 x = _mm512_mul_ps(load16_as_f32(p), _mm512_set1_ps(inverse_scale));
  const __m512 rounded =
      _mm512_maskz_roundscale_ps(kAllLanes, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 gap = _mm512_sub_ps(_mm512_set1_ps(0.5f), _mm512_abs_ps(_mm512_sub_ps(x, rounded)));
  const __mmask16 safe = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(256.0f), _CMP_LT_OQ) &
                         _mm512_cmp_ps_mask(gap, _mm512_set1_ps(kHalfStepMargin), _CMP_GE_OQ);
  if (safe != kAllLanes) return false;  // NaN, large or near a half step
  const __m512 clamped = _mm512_maskz_min_ps(
      kAllLanes, _mm512_maskz_max_ps(kAllLanes, rounded, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  const __m128i bytes =
      _mm512_maskz_cvtepi32_epi8(kAllLanes, _mm512_maskz_cvtps_epi32(kAllLanes, clamped));  // integers: exact
  store_bytes(q, q_stride, bytes, 16);
  return true;
}
constexpr int64_t kQuantizeVector = 16;
#elif defined(MOE_VEC_AVX2)
// 8 stored values as float (F16C comes with AVX2: vec_math.h).
inline __m256 load8_as_f32(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8_as_f32(const bf16_t* p) {
  return bf16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // vec_math.h's
}
inline __m256 load8_as_f32(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 16-value AVX-512 function's 8-value form (the same arithmetic and fallback).
template <typename In>
inline bool quantize_vector_by_reciprocal(int8_t* q, int64_t q_stride, const In* p, float inverse_scale) {
  const __m256 x = _mm256_mul_ps(load8_as_f32(p), _mm256_set1_ps(inverse_scale));
  const __m256 rounded = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 gap =
      _mm256_sub_ps(_mm256_set1_ps(0.5f), _mm256_and_ps(_mm256_sub_ps(x, rounded), magnitude_bits));
  const __m256 safe =
      _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(x, magnitude_bits), _mm256_set1_ps(256.0f), _CMP_LT_OQ),
                    _mm256_cmp_ps(gap, _mm256_set1_ps(kHalfStepMargin), _CMP_GE_OQ));
  if (_mm256_movemask_ps(safe) != 0xff) return false;  // NaN, large or near a half step
  const __m256 clamped =
      _mm256_min_ps(_mm256_max_ps(rounded, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256i ints = _mm256_cvtps_epi32(clamped);  // integers: exact
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(ints), _mm256_extracti128_si256(ints, 1));
  const __m128i bytes = _mm_packs_epi16(words, words);  // within int8: no saturation
  store_bytes(q, q_stride, bytes, 8);
  return true;
}
constexpr int64_t kQuantizeVector = 8;
#endif

// q[i * q_stride] = quantized p[i] for n values, bitwise quantize_divided. With AVX2 or AVX-512, a vector of
// values at a time by the scale's reciprocal where that rounds alike (all but ~0.4 % of 16-value blocks of
// spread values): the division was most of int8_routed's weight quantization (AMX Xeon: 12.6 of 17 ms a
// call).
template <typename In>
inline void quantize_values(int8_t* q, int64_t q_stride, const In* p, int64_t n, float scale) {
  int64_t i = 0;
#if defined(MOE_VEC_AVX2)
  const float inverse_scale = 1.0f / scale;
  for (; i + kQuantizeVector <= n; i += kQuantizeVector)
    if (!quantize_vector_by_reciprocal(q + i * q_stride, q_stride, p + i, inverse_scale))
      quantize_divided(q + i * q_stride, q_stride, p + i, kQuantizeVector, scale);
#endif
  quantize_divided(q + i * q_stride, q_stride, p + i, n - i, scale);
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
