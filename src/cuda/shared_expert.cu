// The shared expert on the GPU: a dense SwiGLU MLP over every token with float32 activations
// (spec §2.5). hs = x @ [sw1 | sw3] in float32; what a matmul reads of the float32 activations (gs,
// dy, dh) is rounded to cfg.matmul_activation_dtype() (the run's bfloat16 or float16 under its default
// precision). Where that is float32 in a 16-bit run (highest precision), the 16-bit operands beside
// an activation are widened to float32 inside the call (exactly) and weight gradients are summed in
// float32 then rounded, since cuBLAS multiplies operands of one dtype. Reference: src/ref/shared_expert.cpp.
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/swiglu.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

class CudaSharedExpert final : public SharedExpertOp {
 public:
  CudaSharedExpert(const OpContext& ctx, Blas& blas)
      : blas_(blas),
        dt_(ctx.cfg.dtype),
        act_dt_(ctx.cfg.matmul_activation_dtype()),
        widen_(act_dt_ != dt_),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim) {
    blas_.ensure_ready();
    Backend& be = ctx.backend;
    const int64_t T = T_, H = H_, S = S_;
    hs_ = be.empty(Dtype::f32, {T, 2 * S});
    gs_ = be.empty(act_dt_, {T, S});
    if (widen_) sw2_wide_ = be.empty(act_dt_, {S, H});
    if (ctx.cfg.bench_pass != BenchPass::forward_backward) return;
    ds_ = be.empty(Dtype::f32, {T, S});
    dh_ = be.empty(act_dt_, {T, 2 * S});
    if (act_dt_ != Dtype::f32) dy_act_ = be.empty(act_dt_, {T, H});
    if (widen_) {
      x_wide_ = be.empty(act_dt_, {T, H});
      sw1_wide_ = be.empty(act_dt_, {H, S});
      sw3_wide_ = be.empty(act_dt_, {H, S});
      dw_wide_ = be.empty(Dtype::f32, {H * S});
    }
  }

  void forward(Tensor& out, const Tensor& x, const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    const Operand xo{x.raw(), dt_, H};
    if (!w.w13.empty()) {
      blas_.gemm(hs_.raw(), Dtype::f32, 2 * S, xo, {w.w13.raw(), dt_, 2 * S}, T, 2 * S, H);
    } else {
      blas_.gemm(hs_.raw(), Dtype::f32, 2 * S, xo, {w.w1.raw(), dt_, S}, T, S, H);
      blas_.gemm(at(hs_, S), Dtype::f32, 2 * S, xo, {w.w3.raw(), dt_, S}, T, S, H);
    }
    swiglu_forward(gs_, hs_, S, {T, nullptr, nullptr});
    // out (T, H) f32 = gs @ sw2.
    blas_.gemm(out.raw(), Dtype::f32, H, {gs_.raw(), act_dt_, S},
               {activation_side(w.w2, sw2_wide_).raw(), act_dt_, H}, T, H, S);
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    const Tensor& dy_act = act_dt_ == Dtype::f32 ? dy : rounded(dy_act_, dy);
    const Tensor& sw2 = activation_side(w.w2, sw2_wide_);
    // ds (T, S) f32 = dy @ sw2^T; dsw2 (S, H) = gs^T @ dy.
    blas_.gemm(ds_.raw(), Dtype::f32, S, {dy_act.raw(), act_dt_, H}, {sw2.raw(), act_dt_, H, true}, T, S, H);
    weight_grad(dw.dw2, [&](void* c, Dtype c_dt) {
      blas_.gemm(c, c_dt, H, {gs_.raw(), act_dt_, S, true}, {dy_act.raw(), act_dt_, H}, S, H, T);
    });
    swiglu_backward(dh_, ds_, hs_, S, {T, nullptr, nullptr});
    // dsw1 = x^T @ da, dsw3 = x^T @ db; dx (T, H) f32 = da @ sw1^T + db @ sw3^T.
    const Operand x_t{activation_side(x, x_wide_).raw(), act_dt_, H, true};
    weight_grad(dw.dw1, [&](void* c, Dtype c_dt) {
      blas_.gemm(c, c_dt, S, x_t, {dh_.raw(), act_dt_, 2 * S}, H, S, T);
    });
    weight_grad(dw.dw3, [&](void* c, Dtype c_dt) {
      blas_.gemm(c, c_dt, S, x_t, {at(dh_, S), act_dt_, 2 * S}, H, S, T);
    });
    blas_.gemm(dx.raw(), Dtype::f32, H, {dh_.raw(), act_dt_, 2 * S},
               {activation_side(w.w1, sw1_wide_).raw(), act_dt_, S, true}, T, H, S);
    blas_.gemm(dx.raw(), Dtype::f32, H, {at(dh_, S), act_dt_, 2 * S},
               {activation_side(w.w3, sw3_wide_).raw(), act_dt_, S, true}, T, H, S, /*beta=*/1.0f);
  }

  // hs (T, 2S) f32 + gs (T, S)
  int64_t saved_bytes() const override { return T_ * S_ * (2 * 4 + int64_t(dtype_size(act_dt_))); }

 private:
  // A run-dtype operand multiplied with an activation: itself, or widened into `wide`.
  const Tensor& activation_side(const Tensor& t, Tensor& wide) {
    if (!widen_) return t;
    convert(wide, t);
    return wide;
  }
  static const Tensor& rounded(Tensor& dst, const Tensor& src) {
    convert(dst, src);
    return dst;
  }
  // A weight gradient (run dtype) from `gemm(c, c_dtype)`: straight, or summed in f32 then rounded.
  template <class Gemm>
  void weight_grad(Tensor& grad, Gemm gemm) {
    if (!widen_) return gemm(grad.raw(), dt_);
    gemm(dw_wide_.raw(), Dtype::f32);
    convert(grad.raw(), dt_, dw_wide_.raw(), Dtype::f32, grad.numel());
  }

  Blas& blas_;
  Dtype dt_, act_dt_;
  bool widen_;  // a bf16 run whose activations reach its matmuls in float32
  int64_t T_, H_, S_;
  Tensor hs_;        // hs (T, 2S) f32 [gate | up]
  Tensor gs_;        // gs (T, S)  activation dtype
  Tensor ds_;        // ds (T, S)  f32
  Tensor dh_;        // dh (T, 2S) activation dtype [da | db]
  Tensor dy_act_;    // dy (T, H)  rounded to the activation dtype (when that is not f32)
  Tensor x_wide_;    // x  (T, H)  f32, widened (highest precision of a bf16 run)
  Tensor sw1_wide_;  // sw1 (H, S) f32, widened
  Tensor sw3_wide_;  // sw3 (H, S) f32, widened
  Tensor sw2_wide_;  // sw2 (S, H) f32, widened
  Tensor dw_wide_;   // (H * S) f32 sums of one weight gradient before rounding
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx, Blas& blas) {
  return std::make_unique<CudaSharedExpert>(ctx, blas);
}

}  // namespace moe::cuda
