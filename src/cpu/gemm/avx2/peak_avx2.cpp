// isa_avx2::peak_loop_f32_fma (cpu/gemm/peak.h): 12 independent 8-wide FMA chains (cpu/gemm/peak_chains.h),
// enough to cover the FMA latency (4-5 cycles) times 2 ports.
#include <immintrin.h>

#include <cstdint>

#include "cpu/gemm/peak.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#define MOE_PEAK_NS moe::cpu::isa_avx2
#include "cpu/gemm/peak_chains.h"

namespace moe::cpu::isa_avx2 {

double peak_loop_f32_fma(int64_t steps) {
  __m256 acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  run_chains(acc, steps, [&](__m256 x) { return _mm256_fmadd_ps(x, a, b); });
  __m256 sum = acc[0];
  for (int i = 1; i < kPeakChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  // The result is used, so the loop is not removed; it never is non-finite.
  volatile float sink = _mm256_cvtss_f32(sum);
  (void)sink;
  return double(steps) * kPeakChains * 8 * 2;
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options

// isa_avx2::peak_loop_int8: the AVX2 int8 kernel's step (gemm_avx2_s8.cpp) on its register tile, 4 rows x
// 16 columns: per row a 32-bit broadcast of 4 int8 and its |a| (vpabsb), per row and 8 columns b with a's
// sign (vpsignb), vpmaddubsw, vpmaddwd by ones, vpaddd: 32 multiply-adds. Operands come from L1 as the
// kernel's do. The loop is written in assembly: the step needs 15 of the 16 vector registers (8
// accumulators, ones, 2 weight vectors, a, |a| and 2 products), and g++ kept some accumulators on the
// stack, a store and a load in each of their chains (on a Zen 3 that "peak" read below what the GEMM
// kernel reached).
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace moe::cpu::isa_avx2 {

double peak_loop_int8(int64_t steps) {
  if (steps <= 0) return 0.0;
  alignas(32) int8_t lhs[16], rhs[64];  // 4 rows' quads; 16 columns' quads
  for (int i = 0; i < 16; ++i) lhs[i] = int8_t(i % 5 - 2);
  for (int i = 0; i < 64; ++i) rhs[i] = int8_t(i % 7 - 3);
  alignas(32) int32_t sums[8];
  int64_t left = steps;
  // One row r: a = the quad at r * 4 bytes, |a|; for each weight vector: sign, multiply pairs, widen, add.
  // clang-format off
#define MOE_PEAK_INT8_ROW(offset, acc0, acc1)            \
  "vbroadcastss " #offset "(%[a]), %%ymm11\n\t"         \
  "vpabsb %%ymm11, %%ymm12\n\t"                          \
  "vpsignb %%ymm11, %%ymm9, %%ymm13\n\t"                 \
  "vpsignb %%ymm11, %%ymm10, %%ymm14\n\t"                \
  "vpmaddubsw %%ymm13, %%ymm12, %%ymm13\n\t"             \
  "vpmaddubsw %%ymm14, %%ymm12, %%ymm14\n\t"             \
  "vpmaddwd %%ymm8, %%ymm13, %%ymm13\n\t"                \
  "vpmaddwd %%ymm8, %%ymm14, %%ymm14\n\t"                \
  "vpaddd %%ymm13, %%" #acc0 ", %%" #acc0 "\n\t"         \
  "vpaddd %%ymm14, %%" #acc1 ", %%" #acc1 "\n\t"
  // clang-format on
  __asm__ volatile(
      "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, %%ymm1\n\t"
      "vmovdqa %%ymm0, %%ymm2\n\t"
      "vmovdqa %%ymm0, %%ymm3\n\t"
      "vmovdqa %%ymm0, %%ymm4\n\t"
      "vmovdqa %%ymm0, %%ymm5\n\t"
      "vmovdqa %%ymm0, %%ymm6\n\t"
      "vmovdqa %%ymm0, %%ymm7\n\t"
      "vpcmpeqw %%ymm8, %%ymm8, %%ymm8\n\t"
      "vpsrlw $15, %%ymm8, %%ymm8\n\t"  // int16 ones
      "1:\n\t"
      "vmovdqa (%[b]), %%ymm9\n\t"
      "vmovdqa 32(%[b]), %%ymm10\n\t"
      MOE_PEAK_INT8_ROW(0, ymm0, ymm1)
      MOE_PEAK_INT8_ROW(4, ymm2, ymm3)
      MOE_PEAK_INT8_ROW(8, ymm4, ymm5)
      MOE_PEAK_INT8_ROW(12, ymm6, ymm7)
      "dec %[left]\n\t"
      "jnz 1b\n\t"
      "vpaddd %%ymm1, %%ymm0, %%ymm0\n\t"
      "vpaddd %%ymm3, %%ymm2, %%ymm2\n\t"
      "vpaddd %%ymm5, %%ymm4, %%ymm4\n\t"
      "vpaddd %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm2, %%ymm0, %%ymm0\n\t"
      "vpaddd %%ymm6, %%ymm4, %%ymm4\n\t"
      "vpaddd %%ymm4, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, (%[sums])\n\t"
      "vzeroupper\n\t"
      : [left] "+r"(left)
      : [a] "r"(lhs), [b] "r"(rhs), [sums] "r"(sums)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14");
#undef MOE_PEAK_INT8_ROW
  volatile int sink = sums[0];  // used, so the loop stays
  (void)sink;
  return double(steps) * 8 * 32 * 2;  // 8 groups of 32 multiply-adds, 2 operations each
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options

// isa_avx2::peak_loop_int8_vnni: 12 chains of the VEX vpdpbusd on ymm (AVX-VNNI: u8 x s8, 4 products summed
// into each int32 lane, 32 multiply-adds an instruction), the peak of the `vnni` variant's ymm instance
// (gemm_vnni_avx2.cpp). In assembly: g++ 12 copies a destructive VEX accumulator through other registers
// and the stack around each intrinsic, and read 0.62 TOP/s where this loop reads 1.08 (2-core Zen 5).
#pragma GCC push_options
#pragma GCC target("avx2,avxvnni")

namespace moe::cpu::isa_avx2 {

double peak_loop_int8_vnni(int64_t steps) {
  if (steps <= 0) return 0.0;
  alignas(32) int8_t a[32], b[32];
  for (int i = 0; i < 32; ++i) a[i] = int8_t(i % 5 + 1), b[i] = int8_t(i % 7 - 3);
  alignas(32) int32_t sums[8];
  int64_t left = steps;
  // clang-format off
  __asm__ volatile(
      "vmovdqa (%[a]), %%ymm12\n\t"
      "vmovdqa (%[b]), %%ymm13\n\t"
      "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, %%ymm1\n\t"  "vmovdqa %%ymm0, %%ymm2\n\t"  "vmovdqa %%ymm0, %%ymm3\n\t"
      "vmovdqa %%ymm0, %%ymm4\n\t"  "vmovdqa %%ymm0, %%ymm5\n\t"  "vmovdqa %%ymm0, %%ymm6\n\t"
      "vmovdqa %%ymm0, %%ymm7\n\t"  "vmovdqa %%ymm0, %%ymm8\n\t"  "vmovdqa %%ymm0, %%ymm9\n\t"
      "vmovdqa %%ymm0, %%ymm10\n\t" "vmovdqa %%ymm0, %%ymm11\n\t"
      "1:\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm0\n\t"  "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm1\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm2\n\t"  "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm3\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm4\n\t"  "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm5\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm6\n\t"  "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm7\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm8\n\t"  "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm9\n\t"
      "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm10\n\t" "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm11\n\t"
      "dec %[left]\n\t"
      "jnz 1b\n\t"
      "vpaddd %%ymm1, %%ymm0, %%ymm0\n\t"   "vpaddd %%ymm3, %%ymm2, %%ymm2\n\t"
      "vpaddd %%ymm5, %%ymm4, %%ymm4\n\t"   "vpaddd %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm9, %%ymm8, %%ymm8\n\t"   "vpaddd %%ymm11, %%ymm10, %%ymm10\n\t"
      "vpaddd %%ymm2, %%ymm0, %%ymm0\n\t"   "vpaddd %%ymm6, %%ymm4, %%ymm4\n\t"
      "vpaddd %%ymm10, %%ymm8, %%ymm8\n\t"  "vpaddd %%ymm4, %%ymm0, %%ymm0\n\t"
      "vpaddd %%ymm8, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, (%[sums])\n\t"
      "vzeroupper\n\t"
      : [left] "+r"(left)
      : [a] "r"(a), [b] "r"(b), [sums] "r"(sums)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13");
  // clang-format on
  volatile int sink = sums[0];  // used, so the loop stays
  (void)sink;
  return double(steps) * 12 * 32 * 2;  // 12 instructions of 32 multiply-adds, 2 operations each
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options
