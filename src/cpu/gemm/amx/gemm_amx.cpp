// The amx GEMM variant: cpu/gemm/amx/gemm_amx_kernel.h's grouped nn, nn_swiglu, nt and tn on the hardware's
// AMX tiles (TDPBF16PS: bf16 A and B tiles, float32 accumulator tiles), bf16 inputs only; nt_swiglu_grad and
// tn_pair are gemm_detail's compositions (our nt then SwiGLU's backward, two tn calls); nn_s8 on AMX-INT8
// tiles (src/cpu/gemm/amx/gemm_amx_s8.cpp). No dense kernel: supports() refuses it, float32 inputs and an nt
// accumulating into bf16, and the table runs the next row.
// Eligible where isa_level() reaches amx (AMX tiles with BF16 and the OS's permission for tile state,
// which cpu_isa() asks for once). Auto's order without a measurement puts it after oneDNN (see
// auto_candidate()), and auto measures it like any other.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "moe/cpu_isa.h"
#include "moe/dtype.h"

// Everything from here to pop_options is AMX and AVX-512 code (an AMX CPU has AVX-512 BF16: isa level
// amx includes avx512_bf16), whatever the build's -march; the headers above are the build ISA's
// (docs/design.md, "ISA levels"), the standard headers the kernel header and vec_math.h include among
// them, so no library inline function is compiled for AVX-512 here. Those two headers come after the pragma.
// The same target as src/cpu/gemm/amx/gemm_amx_s8.cpp and peak_amx.cpp: the three compile
// cpu/gemm/amx/amx_tiles.h's inline functions, of which the linker keeps one copy.
#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,bmi,bmi2,amx-tile,amx-bf16,amx-int8")

#define MOE_TARGET_AVX512_BF16 1
#include "cpu/gemm/amx/amx_tiles.h"
#include "cpu/gemm/amx/gemm_amx_kernel.h"

namespace moe::cpu::isa_amx {

MOE_DEFINE_GEMM_AMX_FORMS(Tiles)

}  // namespace moe::cpu::isa_amx

#pragma GCC pop_options

// Called on any CPU (--list, the registry): build-ISA code.
namespace moe::amx {

std::string gemm_library_version() {
  return "moe-bench AMX bf16 and int8 tile kernels";
}

std::string supports(const GemmCall& call, const GemmThresholds&) {
  // src/cpu/gemm/amx/gemm_amx_s8.cpp: any int8 call (nn_s8_swiglu: its nn_s8, then SwiGLU's quantizing pass)
  if (call.form == GemmForm::nn_s8 || call.form == GemmForm::nn_s8_swiglu) return "";
  if (std::string why = gemm_detail::float_operands(call); !why.empty()) return why;
  if (call.form == GemmForm::dense) return "no dense kernel (the block's groups only)";
  if (call.in_dtype != Dtype::bf16) return "float32 inputs (AMX multiplies bfloat16 tiles)";
  if (call.accumulate && call.out_dtype != Dtype::f32) return "accumulating into a bfloat16 out";
  return "";
}

std::string unavailable() {
  return gemm_detail::needs_isa(IsaLevel::amx, "AMX tiles with BF16 and the OS's permission for tile state");
}

bool bf16_arithmetic() {
  return true;
}

// An output element is one item's sum, in the same order whatever thread runs the item.
bool same_sums_on_any_thread_count() {
  return true;
}

// On the AMX host it beat oneDNN at nn, nn_swiglu, nt and nt_swiglu_grad and lost at tn and tn_pair
// (the kernels log (git show 26fb9b0:docs/kernels.md), session 16): first only where auto measured it faster.
bool auto_candidate() {
  return false;
}

}  // namespace moe::amx
