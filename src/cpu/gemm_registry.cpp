#include <fmt/format.h>

#include <vector>

#include "cpu/gemm_variants.h"

namespace moe {
namespace {

// nn_swiglu / nt_swiglu_grad / tn_pair: the variant's fused up projection + SwiGLU, down projection's
// dgrad + SwiGLU's backward and paired wgrads, or gemm_detail::nn_then_swiglu / nt_then_swiglu_grad /
// tn_twice over its nn / nt / tn.
#define MOE_GEMM_VARIANT(ns, nn_swiglu, nt_swiglu_grad, tn_pair, description)                        \
  GemmVariant {                                                                                      \
#ns, description, &ns::grouped_gemm_nn, nn_swiglu, &ns::grouped_gemm_nt, nt_swiglu_grad,         \
        &ns::grouped_gemm_tn, tn_pair, &ns::dense_gemm, &ns::gemm_library_version, &ns::unavailable, \
        &ns::bf16_arithmetic, &ns::same_sums_on_any_thread_count, &ns::auto_candidate                \
  }

const GemmVariant* active = nullptr;

}  // namespace

const std::vector<GemmVariant>& gemm_variants() {
  static const std::vector<GemmVariant> variants = {
#ifdef MOE_HAVE_DPBF16
      MOE_GEMM_VARIANT(
          dpbf16, &dpbf16::grouped_gemm_nn_swiglu, &dpbf16::grouped_gemm_nt_swiglu_grad,
          &dpbf16::grouped_gemm_tn_pair,
          "AVX-512 micro-kernel for groups up to 1536 rows (bf16: vdpbf16ps; float32: vfmadd231ps for nn, "
          "nt, and nn_swiglu from 384 rows), weights packed panel by panel while the next panel streams in; "
          "oneDNN for the rest"),
#endif
#ifdef MOE_HAVE_ONEDNN
      MOE_GEMM_VARIANT(
          onednn, &gemm_detail::nn_then_swiglu<&onednn::grouped_gemm_nn>,
          &gemm_detail::nt_then_swiglu_grad<&onednn::grouped_gemm_nt>,
          &gemm_detail::tn_twice<&onednn::grouped_gemm_tn>,
          "oneDNN 2.6 matmul per group, cached primitives; brgemm (bf16) or gemm:jit (f32, M >= 512)"),
#endif
      MOE_GEMM_VARIANT(portable, &gemm_detail::nn_then_swiglu<&portable::grouped_gemm_nn>,
                       &gemm_detail::nt_then_swiglu_grad<&portable::grouped_gemm_nt>,
                       &gemm_detail::tn_twice<&portable::grouped_gemm_tn>,
                       "cache-blocked OpenMP f32 GEMM (bf16 widened on the fly); the fallback"),
  };
  return variants;
}

namespace {

const GemmVariant& first_that_runs_here() {
  for (const GemmVariant& v : gemm_variants())
    if (v.unavailable().empty() && v.auto_candidate()) return v;
  MOE_CHECK(false, "the portable GEMM runs everywhere");
}

}  // namespace

const GemmVariant& active_gemm_variant() {
  return active ? *active : first_that_runs_here();
}

Status select_gemm_variant(const std::string& name) {
  if (name == "auto") {
    active = &first_that_runs_here();
    return Status::ok();
  }
  std::string known = "auto";
  for (const GemmVariant& v : gemm_variants()) {
    known += std::string(", ") + v.name;
    if (name != v.name) continue;
    if (const std::string why = v.unavailable(); !why.empty())
      return Status::error(fmt::format("--gemm-variant {} does not run here: {}", name, why));
    active = &v;
    return Status::ok();
  }
  return Status::error(fmt::format("invalid --gemm-variant '{}': expected one of {}", name, known));
}

void grouped_gemm_nn(void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N) {
  MOE_CHECK(N % rhs.parts() == 0, "grouped_gemm_nn: two weight parts split N in halves");
  active_gemm_variant().nn(out, out_dtype, lhs, rhs, in_dtype, groups, Kd, N);
}

void grouped_gemm_nn_swiglu(void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                            Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h) {
  active_gemm_variant().nn_swiglu(h, g, out_dtype, lhs, rhs, in_dtype, groups, Kd, M, row_weight, keep_h);
}

void grouped_gemm_nt(void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(N % rhs.parts() == 0, "grouped_gemm_nt: two weight parts split N in halves");
  MOE_CHECK((!accumulate && rhs.parts() == 1) || out_dtype == Dtype::f32,
            "grouped_gemm_nt sums weight parts and accumulates in a float32 out only");
  active_gemm_variant().nt(out, out_dtype, dout, rhs, in_dtype, groups, Kd, N, accumulate);
}

void grouped_gemm_nt_swiglu_grad(void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h,
                                 Dtype dtype, GroupedShape groups, int64_t M, int64_t N,
                                 const float* row_weight) {
  MOE_CHECK(rhs.parts() == 1, "grouped_gemm_nt_swiglu_grad: the down projection's weights are one tensor");
  active_gemm_variant().nt_swiglu_grad(dh, dg, dout, rhs, h, dtype, groups, M, N, row_weight);
}

void grouped_gemm_tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  MOE_CHECK(ld_dout >= N, "grouped_gemm_tn: dout's row stride must cover its N columns");
  active_gemm_variant().tn(drhs, out_dtype, lhs, dout, in_dtype, groups, Kd, N, ld_dout);
}

void grouped_gemm_tn_pair(void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
                          const void* dout_first, const void* dout_second, Dtype in_dtype,
                          GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  MOE_CHECK(ld_dout >= N, "grouped_gemm_tn_pair: dout's row stride must cover its N columns");
  active_gemm_variant().tn_pair(drhs_first, drhs_second, out_dtype, lhs, dout_first, dout_second, in_dtype,
                                groups, Kd, N, ld_dout);
}

void dense_gemm(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype,
                int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  active_gemm_variant().dense(out, out_dtype, a, a_dtype, b, b_dtype, R, Kd, N, trans_a, trans_b);
}

std::string gemm_library_version() {
  return std::string(active_gemm_variant().name) + ": " + active_gemm_variant().version();
}

}  // namespace moe
