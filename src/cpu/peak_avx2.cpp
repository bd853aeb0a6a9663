// isa_avx2::peak_loop_f32_fma (cpu/peak.h): 12 independent 8-wide FMA chains, enough to cover the FMA
// latency (4-5 cycles) times 2 ports.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/peak.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace moe::cpu::isa_avx2 {

double peak_loop_f32_fma(int64_t steps) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  // The result is used, so the loop is not removed; it never is non-finite.
  volatile float sink = _mm256_cvtss_f32(sum);
  (void)sink;
  return double(steps) * kChains * 8 * 2;
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options

// isa_avx2::peak_loop_int8: the AVX2 int8 kernel's step (gemm_avx2_s8.cpp) on its register tile, 4 rows x
// 16 columns: per row a 32-bit broadcast of 4 int8 and its |a| (vpabsb), per row and 8 columns b with a's
// sign (vpsignb), vpmaddubsw, vpmaddwd by ones, vpaddd: 32 multiply-adds. Operands come from L1 as the
// kernel's do; the empty asm statement with a memory clobber makes the compiler load them every step
// (else it would hoist the products out of the loop).
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace moe::cpu::isa_avx2 {
namespace {

inline __m256i dot_quad(__m256i acc, __m256i a_abs, __m256i a, __m256i b, __m256i ones) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(b, a)), ones));
}

}  // namespace

double peak_loop_int8(int64_t steps) {
  alignas(32) int8_t lhs[16], rhs[64];  // 4 rows' quads; 16 columns' quads
  for (int i = 0; i < 16; ++i) lhs[i] = int8_t(i % 5 - 2);
  for (int i = 0; i < 64; ++i) rhs[i] = int8_t(i % 7 - 3);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
          c31 = c00;
  for (int64_t s = 0; s < steps; ++s) {
    __asm__ volatile("" : : "r"(lhs), "r"(rhs) : "memory");  // they may have changed
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(rhs));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(rhs + 32));
    int32_t q[4];
    std::memcpy(q, lhs, sizeof q);
    __m256i a = _mm256_set1_epi32(q[0]), u = _mm256_abs_epi8(a);
    c00 = dot_quad(c00, u, a, b0, ones);
    c01 = dot_quad(c01, u, a, b1, ones);
    a = _mm256_set1_epi32(q[1]), u = _mm256_abs_epi8(a);
    c10 = dot_quad(c10, u, a, b0, ones);
    c11 = dot_quad(c11, u, a, b1, ones);
    a = _mm256_set1_epi32(q[2]), u = _mm256_abs_epi8(a);
    c20 = dot_quad(c20, u, a, b0, ones);
    c21 = dot_quad(c21, u, a, b1, ones);
    a = _mm256_set1_epi32(q[3]), u = _mm256_abs_epi8(a);
    c30 = dot_quad(c30, u, a, b0, ones);
    c31 = dot_quad(c31, u, a, b1, ones);
  }
  const __m256i sum =
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c00, c01), _mm256_add_epi32(c10, c11)),
                       _mm256_add_epi32(_mm256_add_epi32(c20, c21), _mm256_add_epi32(c30, c31)));
  volatile int sink = _mm256_extract_epi32(sum, 0);  // used, so the loop stays
  (void)sink;
  return double(steps) * 8 * 32 * 2;  // 8 groups of 32 multiply-adds, 2 operations each
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options
