#include "cpu/ops/shared_expert_int8.h"

#include "cpu/ops/swiglu.h"
#include "moe/backend.h"
#include "moe/inputs.h"
#include "moe/quantize.h"

namespace moe::cpu {
namespace {

// Quantized values and their scales: q (rows, width) with a scale per row, or a weight with a scale per
// output column.
struct Quantized {
  Tensor q, scale;
  Quantized() = default;
  Quantized(Backend& be, int64_t rows, int64_t width, int64_t scales)
      : q(be.empty(Dtype::s8, {rows, width})), scale(be.empty(Dtype::f32, {scales})) {}
};

// Forward (fused shown; the split form quantizes w1 and w3 apart, the same per-column values):
//   xq = quant_rows(x);  hs = nn_s8(xq, quant_columns(sw13)) [f32];  gs = SwiGLU(hs) [f32]
//   gq = quant_rows(gs)  [hs, gs and gq from one nn_s8_swiglu];  out = nn_s8(gq, quant_columns(sw2))  [f32]
// Backward (a straight-through estimator, as AQT's: the data gradients through int8 GEMMs, the weight
// gradients in float; AQT rounds the incoming gradient stochastically, we round it to nearest even so
// runs repeat bit for bit):
//   dsw2 = gs^T dy;  ds = nn_s8(quant_rows(dy), quant_rows(sw2)^T);  dhs = SwiGLU'(ds, hs)
//   dsw13 = x^T dhs; dx = nn_s8(quant_rows(dhs), quant_rows(sw13)^T)
// The weights are quantized inside every call (AQT calibrates them each step).
class Int8SharedExpert final : public SharedExpertOp {
 public:
  Int8SharedExpert(const OpContext& ctx, Int8Kernels k)
      : k_(k),
        tracer_(ctx.tracer),
        dt_(ctx.cfg.dtype),
        fused_(ctx.cfg.shared_fused),
        backward_(ctx.cfg.bench_pass == BenchPass::forward_backward),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim),
        one_group_{0, T_} {
    Backend& be = ctx.backend;
    const int64_t T = T_, H = H_, S = S_;
    hs_ = be.empty(Dtype::f32, {T, 2 * S});
    gs_ = be.empty(Dtype::f32, {T, S});
    xq_ = Quantized(be, T, H, T);
    gq_ = Quantized(be, T, S, T);
    const int parts = fused_ ? 1 : 2;
    for (int p = 0; p < parts; ++p) up_q_[p] = Quantized(be, H, 2 * S / parts, 2 * S / parts);
    down_q_ = Quantized(be, S, H, H);
    if (fused_) sw13_work_ = be.empty(dt_, {H, 2 * S});
    if (ctx.cfg.bench_pass == BenchPass::forward_backward) {
      ds_ = be.empty(Dtype::f32, {T, S});
      dhs_ = be.empty(Dtype::f32, {T, 2 * S});
      dyq_ = Quantized(be, T, H, T);
      dhq_ = Quantized(be, T, 2 * S, parts * T);
      for (int p = 0; p < parts; ++p) up_qt_[p] = Quantized(be, 2 * S / parts, H, H);
      down_qt_ = Quantized(be, H, S, S);
      if (fused_) dsw13_ = be.empty(dt_, {H, 2 * S});
    }
  }

  void forward(Tensor& out, const Tensor& x, const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    tracer_("quantize_rows", [&] { quantize_rows(xq_, x.raw(), dt_, T, H); });
    Int8UpPart up;
    if (fused_) {
      const Tensor& sw13 = build_w13(w);
      tracer_("quantize_weights", [&] { quantize_columns(up_q_[0], sw13.raw(), H, 2 * S); });
    } else {
      tracer_("quantize_weights", [&] {
        quantize_columns(up_q_[0], w.w1.raw(), H, S);
        quantize_columns(up_q_[1], w.w3.raw(), H, S);
      });
      up = {up_q_[1].q.data<int8_t>(), up_q_[1].scale.data<float>()};
    }
    // hs, gs and gs's quantized rows from one GEMM whose epilogue runs SwiGLU and the quantization (hs kept
    // for a backward).
    k_.gemm.nn_s8_swiglu({hs_.raw(), gs_.raw(), gq_.q.data<int8_t>(), gq_.scale.data<float>(), backward_},
                         Dtype::f32, operands(xq_, up_q_[0]), up, dense(), H, S, nullptr);
    tracer_("quantize_weights", [&] { quantize_columns(down_q_, w.w2.raw(), S, H); });
    k_.gemm.nn_s8(out.raw(), Dtype::f32, operands(gq_, down_q_), dense(), S, H);
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    // The transposed weights, each quantized per output column of its GEMM (a row of the weight).
    tracer_("quantize_weights", [&] {
      quantize_transposed(down_qt_, w.w2.raw(), S, H);
      if (fused_) {
        quantize_transposed(up_qt_[0], w13_of(w).raw(), H, 2 * S);
      } else {
        quantize_transposed(up_qt_[0], w.w1.raw(), H, S);
        quantize_transposed(up_qt_[1], w.w3.raw(), H, S);
      }
    });
    // dsw2 (S, H) = gs^T @ dy;  ds (T, S) = dy @ sw2^T
    k_.gemm.dense(dw.dw2.raw(), dt_, gs_.raw(), Dtype::f32, dy.raw(), Dtype::f32, S, T, H, true, false);
    quantize_rows(dyq_, dy.raw(), Dtype::f32, T, H);
    k_.gemm.nn_s8(ds_.raw(), Dtype::f32, operands(dyq_, down_qt_), dense(), H, S);
    float* dhs = dhs_.data<float>();
    const float* hs = hs_.data<float>();
    if (fused_) {
      swiglu_backward({dhs, dhs + S, 2 * S}, Dtype::f32, ds_.raw(), {hs, hs + S, 2 * S}, Dtype::f32, T, S,
                      nullptr);
      k_.gemm.dense(dsw13_.raw(), dt_, x.raw(), dt_, dhs, Dtype::f32, H, T, 2 * S, true, false);
      split_last_dim(dw.dw1, dw.dw3, dsw13_);
      quantize_rows(dhq_, dhs, Dtype::f32, T, 2 * S);
      k_.gemm.nn_s8(dx.raw(), Dtype::f32, operands(dhq_, up_qt_[0]), dense(), 2 * S, H);
      return;
    }
    float* dup = dhs + T * S;
    swiglu_backward({dhs, dup, S}, Dtype::f32, ds_.raw(), {hs, hs + S, 2 * S}, Dtype::f32, T, S, nullptr);
    k_.gemm.dense(dw.dw1.raw(), dt_, x.raw(), dt_, dhs, Dtype::f32, H, T, S, true, false);
    k_.gemm.dense(dw.dw3.raw(), dt_, x.raw(), dt_, dup, Dtype::f32, H, T, S, true, false);
    // Gate and up gradients are quantized per row apart, each against its own weight's scales.
    for (int part = 0; part < 2; ++part) {
      int8_t* q = dhq_.q.data<int8_t>() + part * T * S;
      float* s = dhq_.scale.data<float>() + part * T;
      k_.quantize_rows(q, s, part ? dup : dhs, Dtype::f32, T, S, S, false);
      k_.gemm.nn_s8(dx.raw(), Dtype::f32,
                    {q, s, up_qt_[part].q.data<int8_t>(), up_qt_[part].scale.data<float>(), true}, dense(), S,
                    H, /*accumulate=*/part == 1);
    }
  }

  // hs (T, 2S) f32 + gs (T, S) f32
  int64_t saved_bytes() const override { return T_ * S_ * 3 * 4; }

 private:
  GroupedShape dense() const { return {one_group_, 1, nullptr, false}; }
  static Int8Operands operands(const Quantized& rows, const Quantized& weight) {
    return {rows.q.data<int8_t>(), rows.scale.data<float>(), weight.q.data<int8_t>(),
            weight.scale.data<float>(), /*rhs_scale_per_column=*/true};
  }
  void quantize_rows(Quantized& out, const void* x, Dtype dt, int64_t rows, int64_t width) {
    k_.quantize_rows(out.q.data<int8_t>(), out.scale.data<float>(), x, dt, rows, width, width, false);
  }
  // w (Kd, N) per column -> q (Kd, N), scale (N).
  void quantize_columns(Quantized& out, const void* w, int64_t Kd, int64_t N) {
    k_.quantize_columns(out.q.data<int8_t>(), out.scale.data<float>(), w, dt_, Kd, N);
  }
  // w (rows, cols) per row -> q (cols, rows), scale (rows): the rhs of a GEMM by w^T with a scale per
  // output column.
  void quantize_transposed(Quantized& out, const void* w, int64_t rows, int64_t cols) {
    k_.quantize_rows(out.q.data<int8_t>(), out.scale.data<float>(), w, dt_, rows, cols, cols, true);
  }
  // [sw1 | sw3] as the fused form multiplies by (the caller's, or built here inside the timed call, as
  // the seed builds it); the backward quantizes the same copy.
  const Tensor& build_w13(const FfnWeights& w) {
    if (w.w13.empty()) concat_last_dim(sw13_work_, w.w1, w.w3);
    return w13_of(w);
  }
  // The [sw1 | sw3] the forward of w used (the backward runs after it, on the same weights).
  const Tensor& w13_of(const FfnWeights& w) const { return w.w13.empty() ? sw13_work_ : w.w13; }

  Int8Kernels k_;
  const StageTracer& tracer_;
  Dtype dt_;
  bool fused_, backward_;
  int64_t T_, H_, S_;
  int64_t one_group_[2];  // the dense GEMMs as one group of T rows
  Tensor hs_;             // hs  (T, 2S) f32  [gate | up] rows
  Tensor gs_;             // gs  (T, S)  f32
  Tensor ds_;             // ds  (T, S)  f32
  Tensor dhs_;            // dhs (T, 2S) f32  as hs
  Tensor sw13_work_;      // sw13 (H, 2S) run dtype, built when the caller has not
  Tensor dsw13_;          // dsw13 (H, 2S) run dtype
  Quantized xq_, gq_, dyq_, dhq_;
  Quantized up_q_[2], up_qt_[2], down_q_, down_qt_;
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_int8_shared_expert(const OpContext& ctx, Int8Kernels kernels) {
  return std::make_unique<Int8SharedExpert>(ctx, kernels);
}

}  // namespace moe::cpu
