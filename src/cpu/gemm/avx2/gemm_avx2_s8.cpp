// The `avx2_s8` variant: our int8 kernel (cpu/gemm/gemm_s8_kernel.h) on AVX2, which has no int8 dot product,
// for the CPUs without VNNI (Haswell to Zen 3). Its forms are nn_s8 and nn_s8_swiglu.
//
// The dot product: vpmaddubsw multiplies unsigned by signed bytes and adds each pair into an int16 with
// saturation. Operands are symmetric int8 in [-127, 127] (never -128), so with the unsigned side |a| and the
// signed side b with a's sign (vpsignb), a pair sums to at most 2 * 127 * 127 = 32258 < 32767: it never
// saturates, and the weights are packed as they are (no shift, no correction). vpmaddwd by ones widens each
// two int16 into an int32, added into the accumulator: 4 instructions per 32 products, 2 of them multiplies.
// (vpmaddwd on sign-extended int16 pairs is 1 multiply per 16 products, the same multiplier time, and needs
// twice the bytes of packed weights and a widening pass over lhs: the register-resident loops of both ran at
// the same rate on the 2-core EPYC, docs/kernels.md.) Register tile: 4 rows x 16 columns (8 accumulators, 2
// weight vectors, the broadcast, its magnitude and the ones of 16 registers).
#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "cpu/gemm/gemm_s8.h"
#include "cpu/gemm/gemm_variants.h"
#include "moe/cpu_isa.h"

// Everything from here to pop_options is AVX2 code, whatever the build's -march; the headers above are the
// build ISA's (docs/design.md, "ISA levels").
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2")

#define MOE_S8_NS moe::cpu::isa_avx2::s8
#include "cpu/gemm/avx2/gemm_s8_ymm.h"

namespace moe::cpu::isa_avx2::s8 {
namespace {

// The dot product of the file's head: |a| . (b with a's sign), the weights packed as they are.
struct Avx2 : YmmSteps</*Rows=*/4, /*Shifted=*/false> {
  static Vec dot(Vec acc, Vec b, int32_t a) {
    const __m256i av = _mm256_set1_epi32(a);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(av), _mm256_sign_epi8(__m256i(b), av));
    return acc + Vec(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

const moe::s8::Instance kInstance = instance_of<Avx2>("avx2");

}  // namespace moe::cpu::isa_avx2::s8

#pragma GCC pop_options

// Called on any CPU (--list, the registry): build-ISA code.
namespace moe::avx2_s8 {

void grouped_gemm_nn_s8(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  s8::nn_s8_with(cpu::isa_avx2::s8::kInstance, out, out_dtype, in, groups, Kd, N, accumulate);
}

void grouped_gemm_nn_s8_swiglu(const GemmThresholds& /*k*/, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                               Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,
                               const float* row_weight) {
  s8::nn_s8_swiglu_with(cpu::isa_avx2::s8::kInstance, out, out_dtype, in, up, groups, Kd, M, row_weight);
}

std::string gemm_library_version() {
  return "moe-bench int8 micro-kernel (vpmaddubsw)";
}

std::string unavailable() {
  return gemm_detail::needs_isa(IsaLevel::avx2, "AVX2");
}

}  // namespace moe::avx2_s8

MOE_DEFINE_S8_VARIANT_ANSWERS(avx2_s8)
