// The GEMM variants of the kernel table (cpu/gemm/gemm.h), in the table's order: a variant's rows come before
// those of the variants after it, the reference's last. A kernel for a new ISA plugs in with its file(s)
// (docs/design.md, "Kernel table") and one MOE_GEMM_VARIANT line here.
#include <fmt/format.h>

#include <vector>

#include "cpu/gemm/gemm_variants.h"

namespace moe {
namespace {

#ifdef MOE_HAVE_DPBF16
namespace dpbf16_forms = cpu::isa_avx512_bf16::dpbf16;  // its forms, AVX-512 BF16 code
#endif

// A form's function, or none (monostate) for nullptr.
template <typename Fn>
GemmFn form_fn(Fn fn) {
  return fn ? GemmFn(fn) : GemmFn();
}

// name: --gemm-variant's; ns: the namespace of its capability functions; isa: the level its kernels need;
// then its function of each form, in GemmForm's order: its own, gemm_detail's composition of its others
// (nn_swiglu, nt_swiglu_grad, tn_pair), or nullptr where it has none.
#define MOE_GEMM_VARIANT(name, ns, isa, tunable, nn, nn_swiglu, nt, nt_swiglu_grad, tn, tn_pair, dense, \
                         nn_s8, nn_s8_swiglu, description)                                              \
  GemmVariant {                                                                                         \
    name, description, isa, &ns::gemm_library_version, &ns::unavailable, &ns::bf16_arithmetic,          \
        &ns::same_sums_on_any_thread_count, &ns::auto_candidate, tunable, &ns::supports, {              \
      form_fn<GemmNnFn>(nn), form_fn<GemmNnSwigluFn>(nn_swiglu), form_fn<GemmNtFn>(nt),                 \
          form_fn<GemmNtSwigluGradFn>(nt_swiglu_grad), form_fn<GemmTnFn>(tn),                           \
          form_fn<GemmTnPairFn>(tn_pair), form_fn<GemmDenseFn>(dense), form_fn<GemmNnS8Fn>(nn_s8),      \
          form_fn<GemmNnS8SwigluFn>(nn_s8_swiglu)                                                       \
    }                                                                                                   \
  }

}  // namespace

const std::vector<GemmVariant>& gemm_variants() {
  static const std::vector<GemmVariant> variants = {
      MOE_GEMM_VARIANT(
          "amx", amx, IsaLevel::amx, true, &cpu::isa_amx::grouped_gemm_nn,
          &cpu::isa_amx::grouped_gemm_nn_swiglu, &cpu::isa_amx::grouped_gemm_nt,
          &gemm_detail::nt_then_swiglu_grad<&cpu::isa_amx::grouped_gemm_nt>, &cpu::isa_amx::grouped_gemm_tn,
          &gemm_detail::tn_twice<&cpu::isa_amx::grouped_gemm_tn>, nullptr, &cpu::isa_amx::grouped_gemm_nn_s8,
          &cpu::isa_amx::grouped_gemm_nn_s8_swiglu,
          "AMX tiles: bf16 (tdpbf16ps, float32 accumulator tiles) and int8 nn_s8 (tdpbssd, exact int32 "
          "sums), weights packed per call into the tiles' pair or quad-interleaved layout (bf16 nn and "
          "nn_swiglu: once for kept weights), one work list over (expert, column block, row block); the "
          "grouped forms of bf16 inputs, no dense kernel"),
      MOE_GEMM_VARIANT(
          "gemv", gemv, IsaLevel::avx2, true, &gemv::grouped_gemm_nn, &gemv::grouped_gemm_nn_swiglu,
          &gemv::grouped_gemm_nt, &gemm_detail::nt_then_swiglu_grad<&gemv::grouped_gemm_nt>,
          &gemv::grouped_gemm_tn, &gemm_detail::tn_twice<&gemv::grouped_gemm_tn>, nullptr, nullptr, nullptr,
          "row-streaming kernel for groups of 1-64 rows (nt, tn: 1-16): each weight byte read once where it "
          "lies or as packed once for kept weights, prefetched ahead, gradients written with streaming "
          "stores (vdpbf16ps on zmm from AVX-512 BF16 but nn on Intel, else AVX2 FMA on bf16 widened to "
          "float32); bf16 nn, nn_swiglu, nt, nt_swiglu_grad, tn and tn_pair"),
#ifdef MOE_HAVE_DPBF16
      MOE_GEMM_VARIANT(
          "dpbf16", dpbf16, IsaLevel::avx512_bf16, true, &dpbf16_forms::grouped_gemm_nn,
          &dpbf16_forms::grouped_gemm_nn_swiglu, &dpbf16_forms::grouped_gemm_nt,
          &dpbf16_forms::grouped_gemm_nt_swiglu_grad, &dpbf16_forms::grouped_gemm_tn,
          &dpbf16_forms::grouped_gemm_tn_pair, nullptr, nullptr, nullptr,
          "AVX-512 micro-kernel for the block's groups (bf16: vdpbf16ps; float32: vfmadd231ps for nn, nt, "
          "and "
          "nn_swiglu from dpbf16_min_f32_swiglu_rows), weights packed panel by panel while the next panel "
          "streams in; no dense kernel"),
#endif
      MOE_GEMM_VARIANT(
          "vnni", vnni, IsaLevel::avx2, true, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
          &vnni::grouped_gemm_nn_s8, &vnni::grouped_gemm_nn_s8_swiglu,
          "VNNI int8 micro-kernel (vpdpbusd of b + 128 and a, each row's sum corrected: exact int32 "
          "sums) on zmm (AVX-512 VNNI, 12 x 32 tiles) or ymm (AVX-VNNI, 6 x 16), weights packed "
          "per call or once (int8_routed_prequant), SwiGLU and g's row quantization in "
          "nn_s8_swiglu's epilogue; int8 forms only"),
      MOE_GEMM_VARIANT(
          "avx2", avx2, IsaLevel::avx2, true, &avx2::grouped_gemm_nn, &avx2::grouped_gemm_nn_swiglu,
          &avx2::grouped_gemm_nt, &avx2::grouped_gemm_nt_swiglu_grad, &avx2::grouped_gemm_tn,
          &gemm_detail::tn_twice<&avx2::grouped_gemm_tn>, &avx2::dense_gemm, nullptr, nullptr,
          "AVX2 + FMA micro-kernel (6 x 16 float32 tiles) for the block's groups, float32 "
          "arithmetic: bf16 widened while weights are packed and activations staged, results "
          "rounded and SwiGLU (forward and backward) applied in the tile; dense GEMMs of any transposes and "
          "dtype mix"),
#ifdef MOE_HAVE_ONEDNN
      MOE_GEMM_VARIANT(
          "onednn", onednn, IsaLevel::baseline, true, &onednn::grouped_gemm_nn,
          &gemm_detail::nn_then_swiglu<&onednn::grouped_gemm_nn>, &onednn::grouped_gemm_nt,
          &gemm_detail::nt_then_swiglu_grad<&onednn::grouped_gemm_nt>, &onednn::grouped_gemm_tn,
          &gemm_detail::tn_twice<&onednn::grouped_gemm_tn>, &onednn::dense_gemm, &onednn::grouped_gemm_nn_s8,
          &gemm_detail::nn_s8_then_swiglu<&onednn::grouped_gemm_nn_s8>,
          "oneDNN 2.6 matmul per group, cached primitives; brgemm (bf16) or gemm:jit (f32, M >= 512); int8: "
          "s8 x s8 -> s32 where oneDNN's sums are exact (VNNI, AMX), then the reference's dequantization"),
#endif
      MOE_GEMM_VARIANT("portable", portable, IsaLevel::baseline, true, &portable::grouped_gemm_nn,
                       &gemm_detail::nn_then_swiglu<&portable::grouped_gemm_nn>, &portable::grouped_gemm_nt,
                       &gemm_detail::nt_then_swiglu_grad<&portable::grouped_gemm_nt>,
                       &portable::grouped_gemm_tn, &gemm_detail::tn_twice<&portable::grouped_gemm_tn>,
                       &portable::dense_gemm, nullptr, nullptr,
                       "cache-blocked OpenMP f32 GEMM (bf16 widened on the fly)"),
      MOE_GEMM_VARIANT(
          "avx2_s8", avx2_s8, IsaLevel::avx2, true, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
          nullptr, &avx2_s8::grouped_gemm_nn_s8, &avx2_s8::grouped_gemm_nn_s8_swiglu,
          "AVX2 int8 micro-kernel (vpmaddubsw of |a| and b with a's sign, never saturating on "
          "[-127, 127]; exact int32 sums; the vnni variant's kernel, 4 x 16 tiles), weights packed "
          "per call or once, SwiGLU and g's row quantization in nn_s8_swiglu's epilogue; int8 "
          "forms only"),
      MOE_GEMM_VARIANT(
          "ref", ref_gemm, IsaLevel::baseline, false, &ref_gemm::grouped_gemm_nn,
          &ref_gemm::grouped_gemm_nn_swiglu, &ref_gemm::grouped_gemm_nt,
          &ref_gemm::grouped_gemm_nt_swiglu_grad, &ref_gemm::grouped_gemm_tn,
          &gemm_detail::tn_twice<&ref_gemm::grouped_gemm_tn>, &ref_gemm::dense_gemm,
          &ref_gemm::grouped_gemm_nn_s8, &ref_gemm::grouped_gemm_nn_s8_swiglu,
          "the plain reference (src/ref/gemm.cpp, int8_gemm.cpp): float64 loops and exact integer sums, "
          "every form, slow; the tests' oracle"),
  };
  return variants;
}

}  // namespace moe
