// Our int8 kernel (cpu/gemm/gemm_s8_kernel.h) on AVX-VNNI: the VEX vpdpbusd on ymm of client CPUs without
// AVX-512 (Alder Lake and later; Zen 5 has both), a 6-row x 16-column register tile (12 accumulators, 2
// weight vectors, 1 broadcast of 16 registers). Runs where gemm_vnni.cpp's instance choice finds AVX2 and
// AVX-VNNI but no AVX-512 VNNI in use.
#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm/gemm_s8.h"

// Everything from here to pop_options is AVX2 + AVX-VNNI code, whatever the build's -march; the headers
// above are the build ISA's (docs/design.md, "ISA levels").
#pragma GCC push_options
#pragma GCC target("avx2,avxvnni,fma,bmi,bmi2")

#define MOE_S8_NS moe::cpu::isa_avx2::vnni
#include "cpu/gemm/avx2/gemm_s8_ymm.h"

namespace moe::cpu::isa_avx2::vnni {
namespace {

// vpdpbusd multiplies unsigned weights by signed lhs bytes: the weights are packed shifted to u8.
struct Ymm : YmmSteps</*Rows=*/6, /*Shifted=*/true> {
  static Vec dot(Vec acc, Vec b, int32_t a) {
    return Vec(_mm256_dpbusd_avx_epi32(__m256i(acc), __m256i(b), _mm256_set1_epi32(a)));
  }
};

}  // namespace

const moe::s8::Instance kInstance = instance_of<Ymm>("avx_vnni");

}  // namespace moe::cpu::isa_avx2::vnni

#pragma GCC pop_options
