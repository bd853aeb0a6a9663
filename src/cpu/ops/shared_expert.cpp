#include "cpu/ops/shared_expert.h"

#include <algorithm>

#include "cpu/gemm/gemm.h"
#include "cpu/ops/swiglu.h"
#include "cpu/ops/vec_math.h"
#include "moe/backend.h"
#include "moe/inputs.h"

namespace moe::cpu {
namespace {

// The activations hs = x @ [sw1 | sw3] are f32 (spec §2.5); what a matmul reads of them (gs, dy, dhs)
// is kept in act_dt_ = cfg.matmul_activation_dtype(): bf16 under the default matmul precision of a
// bf16 run (one bf16 pass, as JAX on TPU), f32 otherwise.
class CpuSharedExpert final : public SharedExpertOp {
 public:
  CpuSharedExpert(const OpContext& ctx, GemmKernels& gemm)
      : gemm_(gemm),
        dt_(ctx.cfg.dtype),
        act_dt_(ctx.cfg.matmul_activation_dtype()),
        fused_(ctx.cfg.shared_fused),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim) {
    Backend& be = ctx.backend;
    hs_ = be.empty(Dtype::f32, {T_, 2 * S_});
    gs_ = be.empty(act_dt_, {T_, S_});
    if (ctx.cfg.bench_pass == BenchPass::forward_backward) {
      ds_ = be.empty(Dtype::f32, {T_, S_});
      dhs_ = be.empty(act_dt_, {T_, 2 * S_});
      if (act_dt_ != Dtype::f32) dy_act_ = be.empty(act_dt_, {T_, H_});
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
      gemm_.dense(hs_.raw(), Dtype::f32, x.raw(), dt_, sw13.raw(), dt_, T, H, 2 * S);
      gu = {hs_.raw(), hs_.data<float>() + S, 2 * S};
    } else {
      float* up_plane = hs_.data<float>() + T * S;
      gemm_.dense(hs_.raw(), Dtype::f32, x.raw(), dt_, w.w1.raw(), dt_, T, H, S);
      gemm_.dense(up_plane, Dtype::f32, x.raw(), dt_, w.w3.raw(), dt_, T, H, S);
      gu = {hs_.raw(), up_plane, S};
    }
    swiglu_forward(gs_.raw(), act_dt_, gu, Dtype::f32, T, S, nullptr);
    gemm_.dense(out.raw(), Dtype::f32, gs_.raw(), act_dt_, w.w2.raw(), dt_, T, S, H);
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    const void* dy_act = dy.raw();
    if (act_dt_ != Dtype::f32) {
      convert_elements(dy_act_.raw(), act_dt_, dy.data<float>(), Dtype::f32, T * H);
      dy_act = dy_act_.raw();
    }
    // ds (T, S) = dy (T, H) @ sw2^T;  dsw2 (S, H) = gs^T @ dy
    gemm_.dense(ds_.raw(), Dtype::f32, dy_act, act_dt_, w.w2.raw(), dt_, T, H, S, false, true);
    gemm_.dense(dw.dw2.raw(), dt_, gs_.raw(), act_dt_, dy_act, act_dt_, S, T, H, true, false);
    const size_t es = dtype_size(act_dt_);
    char* dhs = static_cast<char*>(dhs_.raw());
    if (fused_) {
      GateUp gu{hs_.raw(), hs_.data<float>() + S, 2 * S};
      GateUpGrad dgu{dhs, dhs + size_t(S) * es, 2 * S};
      swiglu_backward(dgu, act_dt_, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
      gemm_.dense(dsw13_.raw(), dt_, x.raw(), dt_, dhs, act_dt_, H, T, 2 * S, true, false);
      split_last_dim(dw.dw1, dw.dw3, dsw13_);
      gemm_.dense(dx.raw(), Dtype::f32, dhs, act_dt_, w13_of(w).raw(), dt_, T, 2 * S, H, false, true);
    } else {
      char* dup = dhs + size_t(T * S) * es;
      GateUp gu{hs_.raw(), hs_.data<float>() + T * S, S};
      GateUpGrad dgu{dhs, dup, S};
      swiglu_backward(dgu, act_dt_, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
      gemm_.dense(dw.dw1.raw(), dt_, x.raw(), dt_, dhs, act_dt_, H, T, S, true, false);
      gemm_.dense(dw.dw3.raw(), dt_, x.raw(), dt_, dup, act_dt_, H, T, S, true, false);
      gemm_.dense(dx.raw(), Dtype::f32, dhs, act_dt_, w.w1.raw(), dt_, T, S, H, false, true);
      gemm_.dense(dx2_.raw(), Dtype::f32, dup, act_dt_, w.w3.raw(), dt_, T, S, H, false, true);
      add_into(dx.data<float>(), dx2_.data<float>(), T * H);
    }
  }

  // hs (T, 2S) f32 + gs (T, S)
  int64_t saved_bytes() const override { return T_ * S_ * (2 * 4 + int64_t(dtype_size(act_dt_))); }

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

  GemmKernels& gemm_;  // the cpu backend's kernel table for this op's KernelConfig
  Dtype dt_, act_dt_;
  bool fused_;
  int64_t T_, H_, S_;
  Tensor hs_;         // hs   (T, 2S) f32  [gate | up] rows, or gate and up planes of (T, S)
  Tensor gs_;         // gs   (T, S)  act  SwiGLU output
  Tensor ds_;         // ds   (T, S)  f32
  Tensor dhs_;        // dhs  (T, 2S) act  as hs
  Tensor dy_act_;     // dy   (T, H)  act  dy as the backward's matmuls read it (bf16 precision only)
  Tensor dx2_;        // (T, H) f32       the second data-gradient GEMM of the non-fused form
  Tensor sw13_work_;  // sw13 (H, 2S)
  Tensor dsw13_;      // dsw13 (H, 2S)
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx, GemmKernels& gemm) {
  return std::make_unique<CpuSharedExpert>(ctx, gemm);
}

}  // namespace moe::cpu
