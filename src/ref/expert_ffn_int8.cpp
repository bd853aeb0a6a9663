// The routed experts' SwiGLU MLP of the routed int8 quant modes from its definition (spec §6; the cpu op is
// src/cpu/ops/expert_ffn_int8.cpp), per group of the plan's rows, fused impls shown (split impls quantize
// w1 and w3 apart):
//   xq = quant_rows(x_rows)  (outside EP each row is a copy of its token's x: the seed's per-token values)
//   w13q = quant_expert(w13), w2q = quant_expert(w2)  (int8_routed_prequant: the inputs', quantized once)
//   h = xq @ w13q  (exact sums, dequantized: run dtype);  g = silu(gate) * up (* the row weight) from h as
//   stored, in float64, rounded to the run dtype;  gq = quant_rows(g);  y = gq @ w2q  (run dtype)
// Backward (the seed's rule for prequant, the straight-through estimator for the others):
//   dw2 = g^T dy;  dg = quant_rows(dy) @ w2q^T (run dtype);  dh = SwiGLU'(dg, h) (run dtype)
//   dw13 = x^T dh;  dx = quant_rows(dh) @ w13q^T  (f32; split impls: each half quantized against its own
//   weight, the two products summed in f32)
// The int8 GEMMs are the reference's (src/ref/int8_gemm.cpp), the quantization ref_quant's.
#include <vector>

#include "moe/backend.h"
#include "moe/quantize.h"
#include "ref/gemm.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

// Quantized values and their scales: rows per row (rows, width) + (rows), or weights per expert.
struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scale;
  Quantized(size_t values, size_t scales) : q(values), scale(scales) {}
};

Quantized quantize_rows(const void* x, Dtype dt, int64_t rows, int64_t width, int64_t ld) {
  Quantized r(size_t(rows * width), size_t(rows));
  ref_quant::quantize_rows(r.q.data(), r.scale.data(), x, dt, rows, width, ld);
  return r;
}

class RefInt8ExpertFfn final : public ExpertFfnOp {
 public:
  explicit RefInt8ExpertFfn(const OpContext& ctx)
      : cfg_(ctx.cfg),
        dt_(ctx.cfg.dtype),
        traits_(impl_traits(ctx.cfg.impl)),
        prequantized_(ctx.cfg.quant_mode == QuantMode::int8_routed_prequant),
        remat_(ctx.cfg.recomputes_expert_mlp()),
        H_(ctx.cfg.hidden),
        M_(ctx.cfg.mlp_dim),
        E_(ctx.cfg.experts),
        act_(ctx, /*with_gradients=*/false) {
    const int64_t max_rows = max_plan_rows(ctx.cfg, ctx.tile_rows);
    gq_ = Quantized(size_t(max_rows * M_), size_t(max_rows));
    if (ctx.cfg.bench_pass == BenchPass::forward_backward) {
      dg_ = ctx.backend.empty(dt_, {max_rows, M_});
      dh_ = ctx.backend.empty(dt_, {max_rows, 2 * M_});
    }
  }

  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const Quantized xq = quantize_rows(x_rows.raw(), dt_, p.rows, H_, H_);
    const Weight gate = up_weight(w, 0, false), upw = traits_.fuse_w13 ? Weight{} : up_weight(w, 1, false);
    const S8SwigluOut out{act_.h.raw(), act_.g.raw(), gq_.q.data(), gq_.scale.data(), true};
    ref_gemm::grouped_gemm_nn_s8_swiglu({}, out, dt_, operands(xq, gate), {upw.q, upw.scale}, groups(p), H_,
                                        M_, traits_.preweight ? p.row_weight : nullptr);
  }

  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    ref_gemm::grouped_gemm_nn_s8({}, y_rows.raw(), dt_, operands(gq_, down_weight(w, false)), groups(p), M_,
                                 H_, false);
  }

  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights& w, const DispatchPlan& plan) override {
    if (remat_) up(x_rows, w, plan);  // nothing was kept: the up projection and SwiGLU again
    const HostPlan p = host_view(plan);
    const int64_t rows = p.rows, H = H_, M = M_;
    const GroupedShape gs = groups(p);
    ref_gemm::grouped_gemm_tn({}, dw.dw2.raw(), dt_, act_.g.raw(), dy_rows.raw(), dt_, gs, M, H, H);
    ref_gemm::grouped_gemm_nn_s8(
        {}, dg_.raw(), dt_, operands(quantize_rows(dy_rows.raw(), dt_, rows, H, H), down_weight(w, true)), gs,
        H, M, false);
    swiglu_backward(p);
    ref_gemm::grouped_gemm_tn({}, dw.dw1.raw(), dt_, x_rows.raw(), dh_.raw(), dt_, gs, H, M, 2 * M);
    ref_gemm::grouped_gemm_tn({}, dw.dw3.raw(), dt_, x_rows.raw(),
                              static_cast<const char*>(dh_.raw()) + size_t(M) * dtype_size(dt_), dt_, gs, H,
                              M, 2 * M);
    if (traits_.fuse_w13) {
      const Quantized dhq = quantize_rows(dh_.raw(), dt_, rows, 2 * M, 2 * M);
      ref_gemm::grouped_gemm_nn_s8({}, dx_rows.raw(), Dtype::f32, operands(dhq, up_weight(w, 0, true)), gs,
                                   2 * M, H, false);
      return;
    }
    for (int part = 0; part < 2; ++part) {  // each half against its own weight's scale
      const void* half = static_cast<const char*>(dh_.raw()) + size_t(part * M) * dtype_size(dt_);
      const Quantized dhq = quantize_rows(half, dt_, rows, M, 2 * M);
      ref_gemm::grouped_gemm_nn_s8({}, dx_rows.raw(), Dtype::f32, operands(dhq, up_weight(w, part, true)), gs,
                                   M, H, /*accumulate=*/part == 1);
    }
  }

  int64_t saved_bytes(int64_t rows) const override { return expert_mlp_saved_bytes(cfg_, rows); }

 private:
  // A weight's quantized values (E, Kd, N), or (E, N, Kd) transposed, and its scale per expert: the
  // inputs' (prequant) or quantized here into `storage`.
  struct Weight {
    const int8_t* q = nullptr;
    const float* scale = nullptr;
    std::shared_ptr<Quantized> storage;
  };
  static GroupedShape groups(const HostPlan& p) { return {p.group_offset, p.experts, p.group_live, true}; }
  static Int8Operands operands(const Quantized& rows, const Weight& w) {
    return {rows.q.data(), rows.scale.data(), w.q, w.scale};
  }
  Weight quantized(ExpertWeights src, int64_t Kd, int64_t N, bool transposed) const {
    auto s = std::make_shared<Quantized>(size_t(E_ * Kd * N), size_t(E_));
    ref_quant::quantize_experts(s->q.data(), s->scale.data(), src, dt_, E_, Kd, N, transposed);
    return {s->q.data(), s->scale.data(), s};
  }
  static Weight view(const QuantizedWeight& q, bool transposed) {
    MOE_CHECK(!q.empty(),
              "int8_routed_prequant: the inputs carry no quantized weights (make_inputs makes them)");
    return {(transposed ? q.qt : q.q).data<int8_t>(), q.scale.data<float>(), nullptr};
  }
  // The up projection's part p (fused: [w1 | w3] whole; else w1 = 0, w3 = 1).
  Weight up_weight(const FfnWeights& w, int p, bool transposed) const {
    if (prequantized_) return view(traits_.fuse_w13 ? w.q13 : (p ? w.q3 : w.q1), transposed);
    if (!traits_.fuse_w13) return quantized((p ? w.w3 : w.w1).raw(), H_, M_, transposed);
    const ExpertWeights src =
        w.w13.empty() ? ExpertWeights(w.w1.raw(), w.w3.raw()) : ExpertWeights(w.w13.raw());
    return quantized(src, H_, 2 * M_, transposed);
  }
  Weight down_weight(const FfnWeights& w, bool transposed) const {
    if (prequantized_) return view(w.q2, transposed);
    return quantized(w.w2.raw(), M_, H_, transposed);
  }
  // dh = [dgate | dup] of SwiGLU at h as stored from dg, times the row weight (preweight impls), in
  // float64, rounded to the run dtype.
  void swiglu_backward(const HostPlan& p) {
    const int64_t M = M_;
    for (int64_t r = 0; r < p.rows; ++r) {
      const double weight = traits_.preweight ? p.row_weight[r] : 1.0;
      for (int64_t m = 0; m < M; ++m) {
        const double a = act_.h.get(r * 2 * M + m), b = act_.h.get(r * 2 * M + M + m),
                     d = dg_.get(r * M + m) * weight;
        dh_.set(r * 2 * M + m, d * b * silu_grad(a));
        dh_.set(r * 2 * M + M + m, d * silu(a));
      }
    }
  }

  const MoeConfig& cfg_;  // the block's, alive while the op is
  Dtype dt_;
  ImplTraits traits_;
  bool prequantized_, remat_;
  int64_t H_, M_, E_;
  ExpertActivations act_;  // h, g
  Tensor dg_;              // dg (max_rows, M)  run dtype, backward
  Tensor dh_;              // dh (max_rows, 2M) run dtype [dgate | dup], backward
  Quantized gq_{0, 0};     // g's rows quantized (max_rows, M) + (max_rows): down's input
};

}  // namespace

std::unique_ptr<ExpertFfnOp> make_int8_expert_ffn_op(const OpContext& ctx) {
  return std::make_unique<RefInt8ExpertFfn>(ctx);
}

}  // namespace moe::ref
