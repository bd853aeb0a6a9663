// The shared expert from its definition (spec §2.5): hs = x @ [sw1 | sw3], gs = silu(gate) * up,
// out = gs @ sw2, every token, weight 1, and its backward. Sums in float64; hs, ds and both outputs
// rounded to f32 where the CPU op keeps them, weight gradients to the run dtype, and what a matmul
// reads of the f32 activations (gs, dy, dhs) to cfg.matmul_activation_dtype() (bf16 under the
// default precision of a bf16 run). Fused and split forms compute the same values, so this reads
// sw1 and sw3 only.
#include "moe/backend.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

double f32(double v) {
  return double(float(v));
}

std::vector<double> rounded(std::vector<double> v, Dtype dt) {
  for (double& x : v) x = round_to_dtype(x, dt);
  return v;
}

class RefSharedExpert final : public SharedExpertOp {
 public:
  explicit RefSharedExpert(const OpContext& ctx)
      : act_dt_(ctx.cfg.matmul_activation_dtype()),
        T_(ctx.cfg.tokens),
        H_(ctx.cfg.hidden),
        S_(ctx.cfg.shared_expert_dim) {}

  void forward(Tensor& out, const Tensor& x_in, const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    const std::vector<double> x = x_in.to_f64(), w1 = w.w1.to_f64(), w3 = w.w3.to_f64(), w2 = w.w2.to_f64();
    hs_.assign(size_t(T * 2 * S), 0.0);
    gs_.assign(size_t(T * S), 0.0);
    gemm_rows(
        0, T, H, 2 * S, [&](int64_t t, int64_t k) { return x[t * H + k]; },
        [&](int64_t k, int64_t n) { return n < S ? w1[k * S + n] : w3[k * S + n - S]; },
        [&](int64_t t, int64_t n, double v) { hs_[t * 2 * S + n] = f32(v); });
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < S; ++s)
        gs_[t * S + s] = round_to_dtype(silu(hs_[t * 2 * S + s]) * hs_[t * 2 * S + S + s], act_dt_);
    gemm_rows(
        0, T, S, H, [&](int64_t t, int64_t s) { return gs_[t * S + s]; },
        [&](int64_t s, int64_t h) { return w2[s * H + h]; },
        [&](int64_t t, int64_t h, double v) { out.set(t * H + h, v); });
  }

  void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy_in, const Tensor& x_in,
                const FfnWeights& w) override {
    const int64_t T = T_, H = H_, S = S_;
    const std::vector<double> x = x_in.to_f64(), dy = rounded(dy_in.to_f64(), act_dt_);
    const std::vector<double> w1 = w.w1.to_f64(), w3 = w.w3.to_f64(), w2 = w.w2.to_f64();
    std::vector<double> ds(static_cast<size_t>(T * S)), dh(size_t(T * 2 * S));
    // ds = dy @ sw2^T; dsw2 = gs^T @ dy.
    gemm_rows(
        0, T, H, S, [&](int64_t t, int64_t h) { return dy[t * H + h]; },
        [&](int64_t h, int64_t s) { return w2[s * H + h]; },
        [&](int64_t t, int64_t s, double v) { ds[t * S + s] = f32(v); });
    gemm_rows(
        0, S, T, H, [&](int64_t s, int64_t t) { return gs_[t * S + s]; },
        [&](int64_t t, int64_t h) { return dy[t * H + h]; },
        [&](int64_t s, int64_t h, double v) { dw.dw2.set(s * H + h, v); });
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < S; ++s) {
        const double a = hs_[t * 2 * S + s], b = hs_[t * 2 * S + S + s], d = ds[t * S + s];
        dh[t * 2 * S + s] = round_to_dtype(d * b * silu_grad(a), act_dt_);
        dh[t * 2 * S + S + s] = round_to_dtype(d * silu(a), act_dt_);
      }
    // dsw1 = x^T @ da, dsw3 = x^T @ db; dx = da @ sw1^T + db @ sw3^T.
    gemm_rows(
        0, H, T, 2 * S, [&](int64_t h, int64_t t) { return x[t * H + h]; },
        [&](int64_t t, int64_t n) { return dh[t * 2 * S + n]; },
        [&](int64_t h, int64_t n, double v) { (n < S ? dw.dw1 : dw.dw3).set(h * S + n % S, v); });
    gemm_rows(
        0, T, 2 * S, H, [&](int64_t t, int64_t n) { return dh[t * 2 * S + n]; },
        [&](int64_t n, int64_t h) { return n < S ? w1[h * S + n] : w3[h * S + n - S]; },
        [&](int64_t t, int64_t h, double v) { dx.set(t * H + h, v); });
  }

  // hs (T, 2S) f32 + gs (T, S)
  int64_t saved_bytes() const override { return T_ * S_ * (2 * 4 + int64_t(dtype_size(act_dt_))); }

 private:
  Dtype act_dt_;
  int64_t T_, H_, S_;
  std::vector<double> hs_, gs_;  // hs (T, 2S), gs (T, S): f32 values the backward reads
};

}  // namespace

std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx) {
  return std::make_unique<RefSharedExpert>(ctx);
}

}  // namespace moe::ref
