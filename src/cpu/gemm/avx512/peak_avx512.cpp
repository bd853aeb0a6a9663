// The AVX-512 peak loops (cpu/gemm/peak.h): 12 independent 16-lane chains of vfmadd231ps, or of vdpbf16ps (a
// pair of bf16 products per lane: 64 FLOPs an instruction), or of vpdpbusd (int8). The file is AVX-512 BF16
// and VNNI code (the avx512_bf16 level has both); the float32
// loop is vfmadd231ps alone, so it also runs at level avx512.
// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as an unused merge operand,
// which -Wuninitialized reports wherever they inline (as in gemm_dpbf16.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "cpu/gemm/peak.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni")

#define MOE_PEAK_NS moe::cpu::isa_avx512_bf16
#include "cpu/gemm/peak_chains.h"

namespace moe::cpu::isa_avx512_bf16 {
namespace {
float reduce(__m512 (&acc)[kPeakChains]) {
  __m512 sum = acc[0];
  for (int i = 1; i < kPeakChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}
}  // namespace

double peak_loop_f32_fma(int64_t steps) {
  __m512 acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  run_chains(acc, steps, [&](__m512 x) { return _mm512_fmadd_ps(x, a, b); });
  volatile float sink = reduce(acc);
  (void)sink;
  return double(steps) * kPeakChains * 16 * 2;
}

double peak_loop_bf16_dp(int64_t steps) {
  __m512 acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_setzero_ps();
  // bf16 pairs of small values: the sums grow slowly and stay finite.
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  run_chains(acc, steps, [&](__m512 x) { return _mm512_dpbf16_ps(x, a, b); });
  volatile float sink = reduce(acc);
  (void)sink;
  return double(steps) * kPeakChains * 16 * 2 * 2;
}

// 12 chains of vpdpbusd (u8 x s8, 4 products summed into each int32 lane: 64 multiply-adds an
// instruction), the AVX-512 VNNI int8 peak (2-core Zen 4: 0.94 TOP/s, 2x bf16_dp_avx512): written like the
// loops above, a dependent accumulator per chain, so nothing can be hoisted. The chains wrap around int32
// (as vpdpbusd does); their lanes are summed as uint32, where wrapping is defined.
double peak_loop_int8_vnni(int64_t steps) {
  __m512i acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  run_chains(acc, steps, [&](__m512i x) { return _mm512_dpbusd_epi32(x, a, b); });
  __m512i sum = acc[0];
  for (int i = 1; i < kPeakChains; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  uint32_t lanes[16];
  _mm512_storeu_si512(lanes, sum);
  uint32_t total = 0;
  for (uint32_t v : lanes) total += v;
  volatile uint32_t sink = total;  // used, so the loop stays
  (void)sink;
  return double(steps) * kPeakChains * 64 * 2;
}

}  // namespace moe::cpu::isa_avx512_bf16

#pragma GCC pop_options
