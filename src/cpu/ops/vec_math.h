// Element-wise math that the compiler vectorises (no libm calls inside `omp simd` loops), plus
// bulk dtype conversions. exp_approx is accurate to ~2 ulp on its clamped range, which is far below
// every tolerance in docs/design.md; glibc's vector expf would need -ffast-math for the whole file.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "moe/dtype.h"

// A file whose code GCC makes for AVX-512 BF16 or AVX2 by `#pragma GCC target` (which defines no
// __AVX512*__ or __AVX2__ macro) defines MOE_TARGET_AVX512_BF16 or MOE_TARGET_AVX2 before it includes
// this header.
#if defined(__AVX512BF16__) || defined(MOE_TARGET_AVX512_BF16)
#define MOE_VEC_AVX512F 1
#define MOE_VEC_AVX512BF16 1
#elif defined(__AVX512F__)
#define MOE_VEC_AVX512F 1
#endif

#if defined(MOE_VEC_AVX512F)
#include <immintrin.h>
#endif

// F16C's conversions (vcvtph2ps, vcvtps2ph) come with AVX2 on every CPU this project targets; the AVX2
// files' target pragma names f16c.
#if defined(MOE_VEC_AVX512F) || defined(__F16C__) || defined(MOE_TARGET_AVX2)
#define MOE_VEC_F16C 1
#include <immintrin.h>
#endif
#if defined(MOE_VEC_AVX512F) || defined(__AVX2__) || defined(MOE_TARGET_AVX2)
#define MOE_VEC_AVX2 1
#endif

// Files built for different ISAs (an AVX-512 kernel file beside the build's baseline) each get their own
// copies of these inline functions under an inline namespace of their ISA's name: the linker keeps one copy
// of an inline function, which must never be another ISA's. `vec_<level>`, not the kernels' `isa_<level>`:
// an inline namespace must be declared inline first, and headers declare the kernels' ISA namespaces
// (cpu/gemm/gemm_variants.h, gemm_s8.h) in files that include this one after them.
#if defined(MOE_VEC_AVX512BF16)
#define MOE_VEC_ISA vec_avx512_bf16
#elif defined(MOE_VEC_AVX512F)
#define MOE_VEC_ISA vec_avx512
#elif defined(__AVX2__) || defined(MOE_TARGET_AVX2)
#define MOE_VEC_ISA vec_avx2
#else
#define MOE_VEC_ISA vec_baseline
#endif

namespace moe::cpu {
inline namespace MOE_VEC_ISA {

#pragma omp declare simd
inline float exp_approx(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n*ln2 split in two constants (Cody-Waite).
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // Adding and removing 1.5*2^23 rounds to nearest even without a libm call.
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((int32_t(n) + 127) << 23);
}

#pragma omp declare simd
inline float sigmoid_approx(float z) {
  return 1.0f / (1.0f + exp_approx(-z));
}

#if defined(MOE_VEC_AVX512F)
// 16 bf16 values as floats (exact: a bf16 is a float's high half). The masked forms with every lane set:
// GCC 12's unmasked ones merge into an "undefined" vector that -Wmaybe-uninitialized reports where they
// inline.
inline __m512 bf16_to_f32(__m256i v) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, v), 16));
}

// sigmoid(z) of 16 floats, for the GEMM epilogues where it sits between multiplies: 2^t, t = -z log2(e),
// as a degree-5 polynomial of t's fraction (near-minimax on [-1/2, 1/2], 7.5e-8 relative; the fraction
// from z with log2(e) in two parts, as exp_approx's Cody-Waite) scaled by vscalefps, then 1 / (1 + 2^t)
// as vrcp14ps refined by one Newton step: ~3e-7 relative for |z| < 87 (z is clamped there, as in
// exp_approx), half of exp_approx's instructions and no division. A NaN z stays NaN (max and min return
// their second operand, z, when it is NaN). The masked forms with every lane set: GCC 12's unmasked ones
// merge into an "undefined" vector that -Wmaybe-uninitialized reports where they inline.
inline __m512 sigmoid16(__m512 z) {
  constexpr __mmask16 kAll = 0xffff;
  z = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(87.0f), _mm512_maskz_max_ps(kAll, _mm512_set1_ps(-87.0f), z));
  constexpr float kLog2eHi = -1.44269502162933349609375f;  // -log2(e) = kLog2eHi + kLog2eLo
  constexpr float kLog2eLo = -1.925963033500011079e-08f;
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(z, _mm512_set1_ps(kLog2eHi)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fmsub_ps(z, _mm512_set1_ps(kLog2eHi), n);
  f = _mm512_fmadd_ps(z, _mm512_set1_ps(kLog2eLo), f);
  __m512 p = _mm512_set1_ps(0.0013276467798277736f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009675540961325169f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550713464617729f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022120237350464f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
  const __m512 d = _mm512_add_ps(_mm512_maskz_scalef_ps(kAll, p, n), _mm512_set1_ps(1.0f));
  const __m512 r = _mm512_maskz_rcp14_ps(kAll, d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}
#endif

// A stored value as float (bf16 and f16 widen exactly), for loops templated on the storage type.
inline float widen(float v) {
  return v;
}
inline float widen(bf16_t v) {
  return moe::bf16_to_f32(v);
}
inline float widen(f16_t v) {
  return moe::f16_to_f32(v);
}

// dst[i] = float(src[i]) for a row of n bf16 values.
inline void bf16_to_f32_row(float* dst, const bf16_t* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = uint32_t(src[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    dst[i] = f;
  }
}

#if defined(MOE_VEC_AVX2)
// 8 bf16 values as floats (exact).
inline __m256 bf16_to_f32(__m128i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// bf16_words for eight floats none of which is NaN (a NaN's carry could reach its exponent or sign).
inline __m256i bf16_words_not_nan(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
}
// Eight floats as bf16 in the low halves of their dwords, exactly as moe::f32_to_bf16 makes them: rounded to
// nearest even, a NaN a quiet NaN of its sign and high bits.
inline __m256i bf16_words(__m256 v) {
  const __m256i high = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(bf16_words_not_nan(v), quiet,
                            _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// Sixteen floats (lo: the first eight) as bf16 in order; kNotNan: none of them is NaN (the caller checked,
// e.g. with any_nan: a check for many vectors costs less than bf16_words' NaN blend for each).
template <bool kNotNan = false>
inline __m256i bf16_of_16(__m256 lo, __m256 hi) {
  const __m256i a = kNotNan ? bf16_words_not_nan(lo) : bf16_words(lo);
  const __m256i b = kNotNan ? bf16_words_not_nan(hi) : bf16_words(hi);
  // packus works lane by lane: lo0-3 hi0-3 | lo4-7 hi4-7, put back in order by 64-bit quarters.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}

// Whether any of 2n vectors holds a NaN: an unordered compare tests two vectors at once.
template <int kPairs>
inline bool any_nan(const __m256 (&v)[2 * kPairs]) {
  __m256 unordered = _mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q);
  for (int i = 1; i < kPairs; ++i)
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v[2 * i], v[2 * i + 1], _CMP_UNORD_Q));
  return _mm256_movemask_ps(unordered) != 0;
}
#endif

// dst[i] = bf16(src[i]), round to nearest even.
inline void f32_to_bf16_row(bf16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(MOE_VEC_AVX512BF16)
  for (; i + 16 <= n; i += 16) {
    __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<__m256i&>(v));
  }
#elif defined(MOE_VEC_AVX2)
  // The scalar rounding a value took ~8 instructions: the AVX2 kernels' bf16 stores ran at its speed (the
  // gemv tn's gradient at 9 GB/s on a Zen 3 that streams 34-40).
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        bf16_of_16(_mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8)));
#endif
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// dst[i] = float(src[i]) for a row of n float16 values (exact).
inline void f16_to_f32_row(float* dst, const f16_t* src, int64_t n) {
  int64_t i = 0;
#if defined(MOE_VEC_AVX512F)
  // The masked forms with every lane set: GCC 12's unmasked ones merge into an "undefined" vector that
  // -Wmaybe-uninitialized reports wherever they inline.
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(
                                  0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(MOE_VEC_F16C)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// dst[i] = float16(src[i]), round to nearest even (inf beyond 65504, as moe::f32_to_f16).
inline void f32_to_f16_row(f16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(MOE_VEC_AVX512F)
  for (; i + 16 <= n; i += 16)  // masked, as in f16_to_f32_row
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(MOE_VEC_F16C)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// Whether rows of n elements of dt starting at base can leave through stream_row_bf16: bf16 rows of
// whole 64-byte lines, for outputs nothing reads before they leave the caches (the store then fetches
// no line it overwrites).
inline bool streams_bf16_rows(Dtype dt, int64_t n, const void* base) {
#if defined(MOE_VEC_AVX512BF16)
  return dt == Dtype::bf16 && n % 32 == 0 && reinterpret_cast<uintptr_t>(base) % 64 == 0;
#else
  return false;
#endif
}

// The row passes that read rows at random places (dispatch, combine and their backwards) fetch a row
// this many rows ahead of the one they work on, so that several rows' lines are in flight at once.
constexpr int64_t kRowsAhead = 4;

// Asks for the lines of [p, p + bytes) into the caches.
inline void prefetch_bytes(const void* p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b);
}

// Outputs from this many bytes (beyond what the L2 caches of a couple of cores hold) leave the caches
// before anything reads them back.
constexpr size_t kStreamRowsBytes = size_t(2) << 20;

// Whether rows of row_bytes starting at base are whole 64-byte lines, which stream_copy and
// stream_zero write with non-temporal stores: for outputs of many MiB that nothing reads before they
// leave the caches, a plain store first fetches every line it overwrites (a third of the traffic).
inline bool streams_lines(const void* base, size_t row_bytes) {
#if defined(MOE_VEC_AVX512F)
  return row_bytes % 64 == 0 && reinterpret_cast<uintptr_t>(base) % 64 == 0;
#else
  return false;
#endif
}

// dst = src, bytes of whole lines, with non-temporal stores. REQUIRES: streams_lines(dst, bytes).
inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(MOE_VEC_AVX512F)
  auto* d = static_cast<__m512i*>(dst);
  auto* s = static_cast<const char*>(src);
  for (size_t i = 0; i < bytes / 64; ++i) _mm512_stream_si512(d + i, _mm512_loadu_si512(s + 64 * i));
#else
  MOE_CHECK(false, "stream_copy without AVX-512");
#endif
}

// dst = 0, bytes of whole lines, with non-temporal stores. REQUIRES: streams_lines(dst, bytes).
inline void stream_zero(void* dst, size_t bytes) {
#if defined(MOE_VEC_AVX512F)
  auto* d = static_cast<__m512i*>(dst);
  for (size_t i = 0; i < bytes / 64; ++i) _mm512_stream_si512(d + i, _mm512_setzero_si512());
#else
  MOE_CHECK(false, "stream_zero without AVX-512");
#endif
}

// dst = bf16(w * src), rounded to nearest even, with non-temporal stores, in one pass.
// REQUIRES: streams_bf16_rows(bf16, n, dst).
inline void stream_scaled_row_bf16(bf16_t* dst, const float* src, float w, int64_t n) {
#if defined(MOE_VEC_AVX512BF16)
  const __m512 scale = _mm512_set1_ps(w);
  for (int64_t i = 0; i < n; i += 32) {
    // Elements [i, i + 16) from the second operand, [i + 16, i + 32) from the first.
    const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_mul_ps(scale, _mm512_loadu_ps(src + i + 16)),
                                              _mm512_mul_ps(scale, _mm512_loadu_ps(src + i)));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), reinterpret_cast<const __m512i&>(both));
  }
#else
  MOE_CHECK(false, "stream_scaled_row_bf16 without AVX-512 BF16");
#endif
}

// f32_to_bf16_row with non-temporal stores. REQUIRES: streams_bf16_rows(bf16, n, dst).
inline void stream_row_bf16(bf16_t* dst, const float* src, int64_t n) {
  stream_scaled_row_bf16(dst, src, 1.0f, n);  // x 1 is exact
}

// Orders a thread's non-temporal stores before the parallel region's closing barrier.
inline void end_streams() {
#if defined(MOE_VEC_AVX512F)
  _mm_sfence();
#endif
}

// Loads a row of f32, bf16 or f16 as float (copying only when it is 16-bit). Returns the float view.
inline const float* load_row_f32(float* scratch, const void* src, Dtype dt, int64_t n) {
  if (dt == Dtype::f32) return static_cast<const float*>(src);
  if (dt == Dtype::bf16)
    bf16_to_f32_row(scratch, static_cast<const bf16_t*>(src), n);
  else if (dt == Dtype::f16)
    f16_to_f32_row(scratch, static_cast<const f16_t*>(src), n);
  else
    MOE_CHECK(false, std::string("load_row_f32: no CPU kernel reads ") + dtype_name(dt));
  return scratch;
}

// Stores a float row as f32, bf16 or f16 (narrowing rounds to nearest even).
inline void store_row(void* dst, Dtype dt, const float* src, int64_t n) {
  if (dt == Dtype::f32)
    std::memcpy(dst, src, size_t(n) * 4);
  else if (dt == Dtype::bf16)
    f32_to_bf16_row(static_cast<bf16_t*>(dst), src, n);
  else if (dt == Dtype::f16)
    f32_to_f16_row(static_cast<f16_t*>(dst), src, n);
  else
    MOE_CHECK(false, std::string("store_row: no CPU kernel writes ") + dtype_name(dt));
}

// dst[i] += src[i] for n floats, threads over contiguous slices.
inline void add_into(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst (n) in dst_dt = src (n) in src_dt, through f32 (f32, bf16 or f16; narrowing rounds to nearest even),
// in chunks that keep each thread's f32 scratch in cache.
inline void convert_elements(void* dst, Dtype dst_dt, const void* src, Dtype src_dt, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const size_t in_es = dtype_size(src_dt), out_es = dtype_size(dst_dt);
#pragma omp parallel
  {
    alignas(64) float scratch[kChunk];
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t len = n - i < kChunk ? n - i : kChunk;
      store_row(static_cast<char*>(dst) + size_t(i) * out_es, dst_dt,
                load_row_f32(scratch, static_cast<const char*>(src) + size_t(i) * in_es, src_dt, len), len);
    }
  }
}

}  // namespace MOE_VEC_ISA
}  // namespace moe::cpu
