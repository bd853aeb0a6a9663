// The routed experts' SwiGLU MLP on the GPU (quant_mode none): per-expert cuBLAS GEMMs over each
// group's live rows (the baseline issue 21 measured at 91-97 % of a dense GEMM where cuBLAS's grouped
// batched GEMM reached half that), SwiGLU and its backward as element-wise kernels, padding rows
// written as zeros. h is always [gate | up] per row (ld 2M): without a prebuilt w13 the two halves
// are two GEMMs into it. Reference: src/ref/expert_ffn.cpp.
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/groups.h"
#include "cuda/ops.h"
#include "cuda/swiglu.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

class CudaExpertFfn final : public ExpertFfnOp {
 public:
  CudaExpertFfn(const OpContext& ctx, Blas& blas)
      : blas_(blas),
        cfg_(ctx.cfg),
        dt_(ctx.cfg.dtype),
        preweight_(impl_traits(ctx.cfg.impl).preweight),
        remat_(ctx.cfg.recomputes_expert_mlp()),
        H_(ctx.cfg.hidden),
        M_(ctx.cfg.mlp_dim),
        E_(ctx.cfg.experts),
        lanes_(ctx.backend.kernel().cuda_gemm_streams),
        groups_(ctx.cfg.experts),
        act_(ctx, ctx.cfg.bench_pass == BenchPass::forward_backward) {
    blas_.ensure_ready(lanes_);
  }

  // expert_mlp remat: the forward writes into the backward's gradient scratch, which the backward
  // overwrites, so the backward must and does recompute h and g (as the cpu op does).
  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    groups_.read(plan);
    compute_up(remat_ ? act_.dh : act_.h, remat_ ? act_.dg : act_.g, x_rows, w, plan);
  }

  // down follows up on the same plan (moe/ops.h), so the groups up read still hold: no second host wait.
  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const Tensor& g = remat_ ? act_.dg : act_.g;
    const int64_t H = H_, M = M_;
    blas_.fork(lanes_);
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = groups_.offset(e), n = groups_.live(e);
      if (n == 0) continue;
      blas_.gemm_on(e, at(y_rows, r0 * H), dt_, H, {at(g, r0 * M), dt_, M}, {at(w.w2, e * M * H), dt_, H}, n,
                    H, M);
    }
    blas_.join();
    zero_padding_rows(y_rows, plan, groups_);
  }

  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights& w, const DispatchPlan& plan) override {
    groups_.read(plan);
    if (remat_) compute_up(act_.h, act_.g, x_rows, w, plan);
    const int64_t H = H_, M = M_;
    blas_.fork(lanes_);
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = groups_.offset(e), n = groups_.live(e);
      if (n == 0) {  // no rows: the weight gradients are empty sums
        for (Tensor* g : {&dw.dw1, &dw.dw3, &dw.dw2})
          CUDA_CHECK(cudaMemsetAsync(at(*g, e * H * M), 0, size_t(H * M) * dtype_size(dt_), device().stream));
        continue;
      }
      // dw2[e] (M, H) = g_e^T @ dy_e; dg_e (n, M) = dy_e @ w2[e]^T.
      blas_.gemm_on(e, at(dw.dw2, e * M * H), dt_, H, {at(act_.g, r0 * M), dt_, M, true},
                    {at(dy_rows, r0 * H), dt_, H}, M, H, n);
      blas_.gemm_on(e, at(act_.dg, r0 * M), dt_, M, {at(dy_rows, r0 * H), dt_, H},
                    {at(w.w2, e * M * H), dt_, H, true}, n, M, H);
    }
    blas_.join();
    const int64_t rows = groups_.rows();
    swiglu_backward(act_.dh, act_.dg, act_.h, M, row_set(plan, rows));
    blas_.fork(lanes_);
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = groups_.offset(e), n = groups_.live(e);
      if (n == 0) continue;
      // dw1[e] (H, M) = x_e^T @ da_e, dw3[e] = x_e^T @ db_e.
      const Operand x_t{at(x_rows, r0 * H), dt_, H, true};
      blas_.gemm_on(e, at(dw.dw1, e * H * M), dt_, M, x_t, {at(act_.dh, r0 * 2 * M), dt_, 2 * M}, H, M, n);
      blas_.gemm_on(e, at(dw.dw3, e * H * M), dt_, M, x_t, {at(act_.dh, r0 * 2 * M + M), dt_, 2 * M}, H, M,
                    n);
      // dx_e (n, H) f32 = da_e @ w1[e]^T + db_e @ w3[e]^T (one GEMM over [da | db] when w13 exists).
      void* dx = at(dx_rows, r0 * H);
      if (!w.w13.empty()) {
        blas_.gemm_on(e, dx, Dtype::f32, H, {at(act_.dh, r0 * 2 * M), dt_, 2 * M},
                      {at(w.w13, e * H * 2 * M), dt_, 2 * M, true}, n, H, 2 * M);
      } else {
        blas_.gemm_on(e, dx, Dtype::f32, H, {at(act_.dh, r0 * 2 * M), dt_, 2 * M},
                      {at(w.w1, e * H * M), dt_, M, true}, n, H, M);
        blas_.gemm_on(e, dx, Dtype::f32, H, {at(act_.dh, r0 * 2 * M + M), dt_, 2 * M},
                      {at(w.w3, e * H * M), dt_, M, true}, n, H, M, /*beta=*/1.0f);
      }
    }
    blas_.join();
    zero_padding_rows(dx_rows, plan, groups_);
  }

  int64_t saved_bytes(int64_t rows) const override { return expert_mlp_saved_bytes(cfg_, rows); }

 private:
  RowsOf row_set(const DispatchPlan& plan, int64_t rows) const {
    return {rows, static_cast<const int32_t*>(plan.row_assignment.raw()),
            preweight_ ? static_cast<const float*>(plan.row_weight.raw()) : nullptr};
  }

  // h (rows, 2M) = x_rows @ [w1 | w3] per group, g = SwiGLU(h) (times the row weight for preweight
  // impls). REQUIRES groups_ read from plan.
  void compute_up(Tensor& h, Tensor& g, const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) {
    const int64_t H = H_, M = M_;
    blas_.fork(lanes_);
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = groups_.offset(e), n = groups_.live(e);
      if (n == 0) continue;
      const Operand x{at(x_rows, r0 * H), dt_, H};
      if (!w.w13.empty()) {
        blas_.gemm_on(e, at(h, r0 * 2 * M), dt_, 2 * M, x, {at(w.w13, e * H * 2 * M), dt_, 2 * M}, n, 2 * M,
                      H);
      } else {
        blas_.gemm_on(e, at(h, r0 * 2 * M), dt_, 2 * M, x, {at(w.w1, e * H * M), dt_, M}, n, M, H);
        blas_.gemm_on(e, at(h, r0 * 2 * M + M), dt_, 2 * M, x, {at(w.w3, e * H * M), dt_, M}, n, M, H);
      }
    }
    blas_.join();
    swiglu_forward(g, h, M, row_set(plan, groups_.rows()));
  }

  Blas& blas_;
  const MoeConfig& cfg_;  // the block's, alive while the op is
  Dtype dt_;
  bool preweight_, remat_;
  int64_t H_, M_, E_;
  int lanes_;  // streams the per-expert GEMMs spread over
  HostGroups groups_;
  ExpertActivations act_;  // h [gate | up], g pre-weighted for preweight impls; dh [da | db]
};

}  // namespace

std::unique_ptr<ExpertFfnOp> make_expert_ffn_op(const OpContext& ctx, Blas& blas) {
  return std::make_unique<CudaExpertFfn>(ctx, blas);
}

}  // namespace moe::cuda
