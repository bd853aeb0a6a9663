// The shared expert of `int8` and `int8_all` from its definition (AQT's Int8DotGeneralOp; the cpu op is
// src/cpu/ops/shared_expert_int8.cpp): activations quantized per row, weights per output column, f32
// activations (spec §2.5). Fused shown (split impls quantize sw1 and sw3 apart):
//   xq = quant_rows(x);  hs = xq @ quant_columns(sw13) (f32);  gs = SwiGLU(hs) (float64, rounded to f32)
//   gq = quant_rows(gs);  out = gq @ quant_columns(sw2)  (f32)
// Backward (AQT's straight-through rule, the incoming gradient rounded to nearest even):
//   dsw2 = gs^T dy;  ds = quant_rows(dy) @ quant_rows(sw2)^T;  dhs = SwiGLU'(ds, hs) (f32)
//   dsw13 = x^T dhs;  dx = quant_rows(dhs) @ quant_rows(sw13)^T  (split: each half against its own weight,
//   the products summed in f32)
// The weights are quantized in every call (AQT calibrates them each step). The int8 GEMMs are the
// reference's (src/ref/int8_gemm.cpp), the quantization ref_quant's.
#include <vector>

#include "moe/backend.h"
#include "moe/quantize.h"
#include "ref/gemm.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

// Quantized values and their scales (per row, or per output column of a weight).
struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scale;
};

// x (rows, cols) per row -> q (rows, cols), or (cols, rows) transposed (the rhs of a GEMM by x^T with a
// scale per output column), and scale (rows).
Quantized quantize_rows(const void* x, Dtype dt, int64_t rows, int64_t cols, bool transposed = false) {
  Quantized r{std::vector<int8_t>(size_t(rows * cols)), std::vector<float>(size_t(rows))};
  ref_quant::quantize_rows(r.q.data(), r.scale.data(), x, dt, rows, cols, cols, transposed);
  return r;
}

// w (Kd, N) per column -> q (Kd, N), scale (N).
Quantized quantize_columns(const void* w, Dtype dt, int64_t Kd, int64_t N) {
  Quantized r{std::vector<int8_t>(size_t(Kd * N)), std::vector<float>(size_t(N))};
  ref_quant::quantize_columns(r.q.data(), r.scale.data(), w, dt, Kd, N);
  return r;
}

Int8Operands operands(const Quantized& rows, const Quantized& weight) {
  return {rows.q.data(), rows.scale.data(), weight.q.data(), weight.scale.data(),
          /*rhs_scale_per_column=*/true};
}

class RefInt8SharedExpert final : public SharedExpertOp {
 public:
  explicit RefInt8SharedExpert(const OpContext& ctx)
      : dt_(ctx.cfg.dtype),
        fused_(ctx.cfg.shared_fused),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim),
        one_group_{0, T_} {
    hs_ = ctx.backend.empty(Dtype::f32, {T_, 2 * S_});
    gs_ = ctx.backend.empty(Dtype::f32, {T_, S_});
  }

  void forward(Tensor& out, const Tensor& x, const FfnWeights& w) override {
    const int64_t H = H_, S = S_;
    const Quantized xq = quantize_rows(x.raw(), dt_, T_, H);
    // Per output column, [sw1 | sw3] quantizes as sw1 and sw3 apart: the fused and split forms agree here.
    const Quantized q1 = quantize_columns(w.w1.raw(), dt_, H, S),
                    q3 = quantize_columns(w.w3.raw(), dt_, H, S);
    Quantized gq{std::vector<int8_t>(size_t(T_ * S)), std::vector<float>(size_t(T_))};
    ref_gemm::grouped_gemm_nn_s8_swiglu({}, {hs_.raw(), gs_.raw(), gq.q.data(), gq.scale.data(), true},
                                        Dtype::f32, operands(xq, q1), {q3.q.data(), q3.scale.data()}, dense(),
                                        H, S, nullptr);
    const Quantized q2 = quantize_columns(w.w2.raw(), dt_, S, H);
    ref_gemm::grouped_gemm_nn_s8({}, out.raw(), Dtype::f32, operands(gq, q2), dense(), S, H, false);
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    // dsw2 (S, H) = gs^T @ dy;  ds (T, S) = dy @ sw2^T
    ref_gemm::dense_gemm({}, dw.dw2.raw(), dt_, gs_.raw(), Dtype::f32, dy.raw(), Dtype::f32, S, T, H, true,
                         false);
    Tensor ds(Dtype::f32, {T, S});
    ref_gemm::grouped_gemm_nn_s8({}, ds.raw(), Dtype::f32,
                                 operands(quantize_rows(dy.raw(), Dtype::f32, T, H),
                                          quantize_rows(w.w2.raw(), dt_, S, H, /*transposed=*/true)),
                                 dense(), H, S, false);
    const Tensor dhs = swiglu_backward(ds);  // (T, 2S) f32 [dgate | dup]
    const Tensor sw13 = concat(w.w1, w.w3);  // (H, 2S)
    Tensor dsw13(dt_, {H, 2 * S});
    ref_gemm::dense_gemm({}, dsw13.raw(), dt_, x.raw(), dt_, dhs.raw(), Dtype::f32, H, T, 2 * S, true, false);
    for (int64_t k = 0; k < H; ++k)
      for (int64_t s = 0; s < S; ++s) {
        dw.dw1.set(k * S + s, dsw13.get(k * 2 * S + s));
        dw.dw3.set(k * S + s, dsw13.get(k * 2 * S + S + s));
      }
    if (fused_) {  // the transposed [sw1 | sw3] quantized per row of the whole: one scale across both halves
      ref_gemm::grouped_gemm_nn_s8({}, dx.raw(), Dtype::f32,
                                   operands(quantize_rows(dhs.raw(), Dtype::f32, T, 2 * S),
                                            quantize_rows(sw13.raw(), dt_, H, 2 * S, true)),
                                   dense(), 2 * S, H, false);
      return;
    }
    for (int part = 0; part < 2; ++part) {
      const Tensor dpart = columns(dhs, part * S, S);
      ref_gemm::grouped_gemm_nn_s8({}, dx.raw(), Dtype::f32,
                                   operands(quantize_rows(dpart.raw(), Dtype::f32, T, S),
                                            quantize_rows((part ? w.w3 : w.w1).raw(), dt_, H, S, true)),
                                   dense(), S, H, /*accumulate=*/part == 1);
    }
  }

  // hs (T, 2S) f32 + gs (T, S) f32
  int64_t saved_bytes() const override { return T_ * S_ * 3 * 4; }

 private:
  GroupedShape dense() const { return {one_group_, 1, nullptr, false}; }
  // dhs (T, 2S) = [dgate | dup] of SwiGLU at hs from ds, in float64, rounded to f32.
  Tensor swiglu_backward(const Tensor& ds) const {
    const int64_t S = S_;
    Tensor dhs(Dtype::f32, {T_, 2 * S});
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t s = 0; s < S; ++s) {
        const double a = hs_.get(t * 2 * S + s), b = hs_.get(t * 2 * S + S + s), d = ds.get(t * S + s);
        dhs.set(t * 2 * S + s, d * b * silu_grad(a));
        dhs.set(t * 2 * S + S + s, d * silu(a));
      }
    return dhs;
  }
  // [a | b] along the last dim of two (rows, cols) tensors, in a's dtype.
  static Tensor concat(const Tensor& a, const Tensor& b) {
    const int64_t rows = a.dim(0), cols = a.dim(1);
    Tensor ab(a.dtype(), {rows, 2 * cols});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        ab.set(r * 2 * cols + c, a.get(r * cols + c));
        ab.set(r * 2 * cols + cols + c, b.get(r * cols + c));
      }
    return ab;
  }
  // Columns [first, first + count) of t (rows, cols).
  static Tensor columns(const Tensor& t, int64_t first, int64_t count) {
    const int64_t rows = t.dim(0), cols = t.dim(1);
    Tensor out(t.dtype(), {rows, count});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < count; ++c) out.set(r * count + c, t.get(r * cols + first + c));
    return out;
  }

  Dtype dt_;
  bool fused_;
  int64_t T_, H_, S_;
  int64_t one_group_[2];  // the dense GEMMs as one group of T rows
  Tensor hs_;             // hs (T, 2S) f32 [gate | up]
  Tensor gs_;             // gs (T, S)  f32
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_int8_shared_expert_op(const OpContext& ctx) {
  return std::make_unique<RefInt8SharedExpert>(ctx);
}

}  // namespace moe::ref
