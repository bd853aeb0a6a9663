// isa_avx2::peak_loop_f32_fma (cpu/peak.h): 12 independent 8-wide FMA chains, enough to cover the FMA
// latency (4-5 cycles) times 2 ports.
#include <immintrin.h>

#include <cstdint>

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
