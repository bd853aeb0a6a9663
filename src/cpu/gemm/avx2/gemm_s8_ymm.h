// The ymm int8 instances' geometry, memory and float steps (avx2_s8's in gemm_avx2_s8.cpp, AVX-VNNI's in
// gemm_vnni_avx2.cpp) on cpu/gemm/gemm_s8_kernel.h: included under the includer's AVX2 target pragma with its
// MOE_S8_NS, so each instance's copy is its own ISA's. An instance adds its dot step.
#pragma once

#include "cpu/gemm/gemm_s8_kernel.h"

namespace MOE_S8_NS {

// Rows: of the register tile (its columns: 2 vectors of 8 lanes); Shifted: weights packed as u8 = b + 128.
template <int Rows, bool Shifted>
struct YmmSteps : Vectors256 {
  static constexpr int kLanes = 8, kRows = Rows;
  static constexpr bool kShifted = Shifted;
  static void stream(void* p, Vec v) { _mm256_stream_si256(static_cast<__m256i*>(p), __m256i(v)); }
  static void fence() { _mm_sfence(); }
  static Bits widen(const int8_t* p) {
    return Bits(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static Floats fma(Floats a, Floats b, Floats c) {
    return Floats(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
  }
};

}  // namespace MOE_S8_NS
