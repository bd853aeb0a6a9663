// The GEMM variants of the kernel table (moe/gemm.h), in the table's order: a variant's rows come before
// those of the variants after it, the reference's last. A kernel for a new ISA plugs in with its file(s)
// (docs/design.md, "Kernel table") and one MOE_GEMM_VARIANT line here.
#include <fmt/format.h>

#include <vector>

#include "cpu/gemm_variants.h"

namespace moe {
namespace {

// name: --gemm-variant's; ns: the variant's namespace; isa: the level its kernels need; nn_swiglu /
// nt_swiglu_grad / tn_pair: its fused forms, or gemm_detail's compositions of its nn / nt / tn; dense
// and nn_s8: its kernels of those, or GemmFn() for none.
#define MOE_GEMM_VARIANT(name, ns, isa, tunable, nn_swiglu, nt_swiglu_grad, tn_pair, dense, nn_s8, \
                         description)                                                              \
  GemmVariant {                                                                                    \
    name, description, isa, &ns::gemm_library_version, &ns::unavailable, &ns::bf16_arithmetic,     \
        &ns::same_sums_on_any_thread_count, &ns::auto_candidate, tunable, &ns::supports, {         \
      GemmFn(GemmNnFn(&ns::grouped_gemm_nn)), GemmFn(GemmNnSwigluFn(nn_swiglu)),                   \
          GemmFn(GemmNtFn(&ns::grouped_gemm_nt)), GemmFn(GemmNtSwigluGradFn(nt_swiglu_grad)),      \
          GemmFn(GemmTnFn(&ns::grouped_gemm_tn)), GemmFn(GemmTnPairFn(tn_pair)), dense, nn_s8      \
    }                                                                                              \
  }

}  // namespace

const std::vector<GemmVariant>& gemm_variants() {
  static const std::vector<GemmVariant> variants = {
#ifdef MOE_HAVE_DPBF16
      MOE_GEMM_VARIANT(
          "dpbf16", dpbf16, IsaLevel::avx512_bf16, true, &dpbf16::grouped_gemm_nn_swiglu,
          &dpbf16::grouped_gemm_nt_swiglu_grad, &dpbf16::grouped_gemm_tn_pair, GemmFn(), GemmFn(),
          "AVX-512 micro-kernel for the block's groups (bf16: vdpbf16ps; float32: vfmadd231ps for nn, nt, "
          "and "
          "nn_swiglu from dpbf16_min_f32_swiglu_rows), weights packed panel by panel while the next panel "
          "streams in; no dense kernel"),
#endif
#ifdef MOE_HAVE_ONEDNN
      MOE_GEMM_VARIANT(
          "onednn", onednn, IsaLevel::baseline, true, &gemm_detail::nn_then_swiglu<&onednn::grouped_gemm_nn>,
          &gemm_detail::nt_then_swiglu_grad<&onednn::grouped_gemm_nt>,
          &gemm_detail::tn_twice<&onednn::grouped_gemm_tn>, GemmFn(GemmDenseFn(&onednn::dense_gemm)),
          GemmFn(),
          "oneDNN 2.6 matmul per group, cached primitives; brgemm (bf16) or gemm:jit (f32, M >= 512)"),
#endif
      MOE_GEMM_VARIANT("portable", portable, IsaLevel::baseline, true,
                       &gemm_detail::nn_then_swiglu<&portable::grouped_gemm_nn>,
                       &gemm_detail::nt_then_swiglu_grad<&portable::grouped_gemm_nt>,
                       &gemm_detail::tn_twice<&portable::grouped_gemm_tn>,
                       GemmFn(GemmDenseFn(&portable::dense_gemm)), GemmFn(),
                       "cache-blocked OpenMP f32 GEMM (bf16 widened on the fly)"),
      MOE_GEMM_VARIANT(
          "ref", ref_gemm, IsaLevel::baseline, false, &ref_gemm::grouped_gemm_nn_swiglu,
          &ref_gemm::grouped_gemm_nt_swiglu_grad, &gemm_detail::tn_twice<&ref_gemm::grouped_gemm_tn>,
          GemmFn(GemmDenseFn(&ref_gemm::dense_gemm)), GemmFn(GemmNnS8Fn(&ref_gemm::grouped_gemm_nn_s8)),
          "the plain reference (src/ref/gemm.cpp, int8_gemm.cpp): float64 loops and exact integer sums, "
          "every form, slow; the tests' oracle"),
  };
  return variants;
}

}  // namespace moe
