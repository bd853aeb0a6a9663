// Our int8 kernel (cpu/gemm/gemm_s8_kernel.h) on AVX-512 VNNI: vpdpbusd on zmm, a 12-row x 32-column register
// tile (24 accumulators, 2 weight vectors, 1 broadcast of 32 registers). Runs where gemm_vnni.cpp's
// instance choice finds AVX-512 and its VNNI (Cascade Lake and later Xeons, Zen 4, Zen 5).
// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as the unused merge operand,
// which -Wmaybe-uninitialized (and, for some, -Wuninitialized) reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm/gemm_s8.h"

// Everything from here to pop_options is AVX-512 VNNI code, whatever the build's -march; the headers above
// are the build ISA's (docs/design.md, "ISA levels").
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,bmi,bmi2")

#define MOE_S8_NS moe::cpu::isa_avx512::vnni
#include "cpu/gemm/gemm_s8_kernel.h"

namespace moe::cpu::isa_avx512::vnni {
namespace {

// vpdpbusd multiplies unsigned weights by signed lhs bytes: the weights are packed shifted to u8.
struct Zmm : Vectors512 {
  static constexpr int kLanes = 16, kRows = 12;
  static constexpr bool kShifted = true;
  static void stream(void* p, Vec v) { _mm512_stream_si512(static_cast<__m512i*>(p), __m512i(v)); }
  static void fence() { _mm_sfence(); }
  static Bits widen(const int8_t* p) {
    return Bits(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static Floats fma(Floats a, Floats b, Floats c) {
    return Floats(_mm512_fmadd_ps(__m512(a), __m512(b), __m512(c)));
  }
  static Vec dot(Vec acc, Vec b, int32_t a) {
    return Vec(_mm512_dpbusd_epi32(__m512i(acc), __m512i(b), _mm512_set1_epi32(a)));
  }
};

}  // namespace

const moe::s8::Instance kInstance = instance_of<Zmm>("avx512_vnni");

}  // namespace moe::cpu::isa_avx512::vnni

#pragma GCC pop_options
