#include "cpu/shared_expert.h"

#include "cpu/swiglu.h"
#include "moe/backend.h"
#include "moe/gemm.h"
#include "moe/inputs.h"

namespace moe::cpu {
namespace {

void add_into(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

class CpuSharedExpert final : public SharedExpertOp {
 public:
  explicit CpuSharedExpert(const OpContext& ctx)
      : dt_(ctx.cfg.dtype),
        fused_(ctx.cfg.shared_fused),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim) {
    Backend& be = ctx.backend;
    hs_ = be.empty(Dtype::f32, {T_, 2 * S_});
    gs_ = be.empty(Dtype::f32, {T_, S_});
    if (ctx.cfg.bench_pass == BenchPass::forward_backward) {
      ds_ = be.empty(Dtype::f32, {T_, S_});
      dhs_ = be.empty(Dtype::f32, {T_, 2 * S_});
      if (fused_) {
        sw13_work_ = be.empty(dt_, {H_, 2 * S_});
        dsw13_ = be.empty(dt_, {H_, 2 * S_});
      } else {
        dx2_ = be.empty(Dtype::f32, {T_, H_});
      }
    }
  }

  // hs = x @ [sw1 | sw3] (f32), gs = silu(gate) * up, out = gs @ sw2.
  void forward(Tensor& out, const Tensor& x, const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    GateUp gu;
    if (fused_) {
      const Tensor& sw13 = build_w13(w);
      dense_gemm(hs_.raw(), Dtype::f32, x.raw(), dt_, sw13.raw(), dt_, T, H, 2 * S);
      gu = {hs_.raw(), hs_.data<float>() + S, 2 * S};
    } else {
      float* up_plane = hs_.data<float>() + T * S;
      dense_gemm(hs_.raw(), Dtype::f32, x.raw(), dt_, w.w1.raw(), dt_, T, H, S);
      dense_gemm(up_plane, Dtype::f32, x.raw(), dt_, w.w3.raw(), dt_, T, H, S);
      gu = {hs_.raw(), up_plane, S};
    }
    swiglu_forward(gs_.raw(), gu, Dtype::f32, T, S, nullptr);
    dense_gemm(out.raw(), Dtype::f32, gs_.raw(), Dtype::f32, w.w2.raw(), dt_, T, S, H);
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    // ds (T, S) = dy (T, H) @ sw2^T;  dsw2 (S, H) = gs^T @ dy
    dense_gemm(ds_.raw(), Dtype::f32, dy.raw(), Dtype::f32, w.w2.raw(), dt_, T, H, S, false, true);
    dense_gemm(dw.dw2.raw(), dt_, gs_.raw(), Dtype::f32, dy.raw(), Dtype::f32, S, T, H, true, false);
    if (fused_) {
      GateUp gu{hs_.raw(), hs_.data<float>() + S, 2 * S};
      GateUpGrad dgu{dhs_.raw(), dhs_.data<float>() + S, 2 * S};
      swiglu_backward(dgu, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
      dense_gemm(dsw13_.raw(), dt_, x.raw(), dt_, dhs_.raw(), Dtype::f32, H, T, 2 * S, true, false);
      split_last_dim(dw.dw1, dw.dw3, dsw13_);
      dense_gemm(dx.raw(), Dtype::f32, dhs_.raw(), Dtype::f32, w13_of(w).raw(), dt_, T, 2 * S, H, false,
                 true);
    } else {
      float* dup = dhs_.data<float>() + T * S;
      GateUp gu{hs_.raw(), hs_.data<float>() + T * S, S};
      GateUpGrad dgu{dhs_.raw(), dup, S};
      swiglu_backward(dgu, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
      dense_gemm(dw.dw1.raw(), dt_, x.raw(), dt_, dhs_.raw(), Dtype::f32, H, T, S, true, false);
      dense_gemm(dw.dw3.raw(), dt_, x.raw(), dt_, dup, Dtype::f32, H, T, S, true, false);
      dense_gemm(dx.raw(), Dtype::f32, dhs_.raw(), Dtype::f32, w.w1.raw(), dt_, T, S, H, false, true);
      dense_gemm(dx2_.raw(), Dtype::f32, dup, Dtype::f32, w.w3.raw(), dt_, T, S, H, false, true);
      add_into(dx.data<float>(), dx2_.data<float>(), T * H);
    }
  }

  int64_t saved_bytes() const override { return T_ * 3 * S_ * 4; }  // hs (T, 2S) + gs (T, S), f32

 private:
  // The seed builds [sw1 | sw3] inside the differentiated call; a caller that has not built it gets
  // it built here (timed).
  const Tensor& build_w13(const FfnWeights& w) {
    if (!w.w13.empty()) return w.w13;
    if (sw13_work_.empty()) sw13_work_ = Tensor(dt_, {H_, 2 * S_}, hs_.memory());
    concat_last_dim(sw13_work_, w.w1, w.w3);
    return sw13_work_;
  }
  // The w13 the forward used (the backward runs after it).
  const Tensor& w13_of(const FfnWeights& w) const { return w.w13.empty() ? sw13_work_ : w.w13; }

  Dtype dt_;
  bool fused_;
  int64_t T_, H_, S_;
  Tensor hs_;         // hs   (T, 2S) f32  [gate | up] rows, or gate and up planes of (T, S)
  Tensor gs_;         // gs   (T, S)  f32
  Tensor ds_;         // ds   (T, S)  f32
  Tensor dhs_;        // dhs  (T, 2S) f32
  Tensor dx2_;        // (T, H) f32       the second data-gradient GEMM of the non-fused form
  Tensor sw13_work_;  // sw13 (H, 2S)
  Tensor dsw13_;      // dsw13 (H, 2S)
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx) {
  return std::make_unique<CpuSharedExpert>(ctx);
}

}  // namespace moe::cpu
