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
#include "cpu/gemm/gemm_s8_kernel.h"

namespace moe::cpu::isa_avx2::vnni {
namespace {

struct Ymm : Vectors256 {
  static constexpr int kLanes = 8, kRows = 6;
  static constexpr bool kShifted = true;
  static void stream(void* p, Vec v) { _mm256_stream_si256(static_cast<__m256i*>(p), __m256i(v)); }
  static void fence() { _mm_sfence(); }
  static Bits widen(const int8_t* p) {
    return Bits(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static Floats fma(Floats a, Floats b, Floats c) {
    return Floats(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
  }
  static Vec dot(Vec acc, Vec b, int32_t a) {
    return Vec(_mm256_dpbusd_avx_epi32(__m256i(acc), __m256i(b), _mm256_set1_epi32(a)));
  }
};

void run(const moe::s8::Work& w) {
  Kernel<Ymm>::run(w);
}

}  // namespace

const moe::s8::Instance kInstance{"avx_vnni", Kernel<Ymm>::kGeometry, &run};

}  // namespace moe::cpu::isa_avx2::vnni

#pragma GCC pop_options
