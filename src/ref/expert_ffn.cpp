// The routed experts' SwiGLU MLP from its definition, per group e over its rows r (spec §3.4):
//   h = x_r @ [w1[e] | w3[e]],  g = silu(h_gate) * h_up (* the row weight for preweight impls),
//   y_r = g @ w2[e],
// and the hand-derived backward. Sums in float64; h, g, y, dg and dh rounded to the run dtype and
// dx_rows to f32 where the CPU op stores them. Fused and split impls compute the same values (w13 is
// [w1 | w3]), so this op reads w1 and w3 only. Padding rows are computed like any row (zero in, zero out).
#include "moe/backend.h"
#include "ref/ref.h"

namespace moe::ref {

namespace {

class RefExpertFfn final : public ExpertFfnOp {
 public:
  explicit RefExpertFfn(const OpContext& ctx)
      : cfg_(ctx.cfg),
        preweight_(impl_traits(ctx.cfg.impl).preweight),
        remat_(ctx.cfg.recomputes_expert_mlp()),
        act_(ctx, /*with_gradients=*/false) {}

  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t H = cfg_.hidden, M = cfg_.mlp_dim;
    const std::vector<double> x = x_rows.to_f64(), w1 = w.w1.to_f64(), w3 = w.w3.to_f64();
    for (int64_t e = 0; e < cfg_.experts; ++e) {
      const int64_t w_off = e * H * M;
      gemm_rows(
          p.group_offset[e], p.group_offset[e + 1], H, 2 * M,
          [&](int64_t r, int64_t k) { return x[r * H + k]; },
          [&](int64_t k, int64_t n) { return n < M ? w1[w_off + k * M + n] : w3[w_off + k * M + n - M]; },
          [&](int64_t r, int64_t n, double v) { act_.h.set(r * 2 * M + n, v); });
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      const double weight = preweight_ ? p.row_weight[r] : 1.0;
      for (int64_t m = 0; m < M; ++m)
        act_.g.set(r * M + m, silu(act_.h.get(r * 2 * M + m)) * act_.h.get(r * 2 * M + M + m) * weight);
    }
  }

  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t H = cfg_.hidden, M = cfg_.mlp_dim;
    const std::vector<double> g = act_.g.to_f64(), w2 = w.w2.to_f64();
    for (int64_t e = 0; e < cfg_.experts; ++e)
      gemm_rows(
          p.group_offset[e], p.group_offset[e + 1], M, H, [&](int64_t r, int64_t m) { return g[r * M + m]; },
          [&](int64_t m, int64_t n) { return w2[e * M * H + m * H + n]; },
          [&](int64_t r, int64_t n, double v) { y_rows.set(r * H + n, v); });
  }

  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights& w, const DispatchPlan& plan) override {
    // Under expert_mlp remat nothing was kept: recompute the up projection and SwiGLU output.
    if (remat_) up(x_rows, w, plan);
    const HostPlan p = host_view(plan);
    const int64_t H = cfg_.hidden, M = cfg_.mlp_dim, rows = p.rows;
    const std::vector<double> x = x_rows.to_f64(), dy = dy_rows.to_f64(), h = act_.h.to_f64(),
                              g = act_.g.to_f64();
    const std::vector<double> w1 = w.w1.to_f64(), w3 = w.w3.to_f64(), w2 = w.w2.to_f64();
    std::vector<double> dg(static_cast<size_t>(rows * M)), da(size_t(rows * M)), db(size_t(rows * M));
    for (int64_t e = 0; e < cfg_.experts; ++e) {
      const int64_t r0 = p.group_offset[e], n_rows = p.group_rows(e);
      // dg = dy_r @ w2[e]^T (stored in the run dtype); dw2[e] = g_e^T @ dy_e.
      gemm_rows(
          r0, r0 + n_rows, H, M, [&](int64_t r, int64_t n) { return dy[r * H + n]; },
          [&](int64_t n, int64_t m) { return w2[e * M * H + m * H + n]; },
          [&](int64_t r, int64_t m, double v) { dg[r * M + m] = round_to_dtype(v, cfg_.dtype); });
      gemm_rows(
          0, M, n_rows, H, [&](int64_t m, int64_t j) { return g[(r0 + j) * M + m]; },
          [&](int64_t j, int64_t n) { return dy[(r0 + j) * H + n]; },
          [&](int64_t m, int64_t n, double v) { dw.dw2.set(e * M * H + m * H + n, v); });
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double weight = preweight_ ? p.row_weight[r] : 1.0;
      for (int64_t m = 0; m < M; ++m) {
        const double a = h[r * 2 * M + m], b = h[r * 2 * M + M + m], d = dg[r * M + m] * weight;
        da[r * M + m] = round_to_dtype(d * b * silu_grad(a), cfg_.dtype);
        db[r * M + m] = round_to_dtype(d * silu(a), cfg_.dtype);
      }
    }
    for (int64_t e = 0; e < cfg_.experts; ++e) {
      const int64_t r0 = p.group_offset[e], n_rows = p.group_rows(e), w_off = e * H * M;
      // dw1[e] = x_e^T @ da_e, dw3[e] = x_e^T @ db_e; dx_r = da_r @ w1[e]^T + db_r @ w3[e]^T (f32).
      gemm_rows(
          0, H, n_rows, 2 * M, [&](int64_t k, int64_t j) { return x[(r0 + j) * H + k]; },
          [&](int64_t j, int64_t n) { return n < M ? da[(r0 + j) * M + n] : db[(r0 + j) * M + n - M]; },
          [&](int64_t k, int64_t n, double v) { (n < M ? dw.dw1 : dw.dw3).set(w_off + k * M + n % M, v); });
      gemm_rows(
          r0, r0 + n_rows, 2 * M, H,
          [&](int64_t r, int64_t n) { return n < M ? da[r * M + n] : db[r * M + n - M]; },
          [&](int64_t n, int64_t k) { return n < M ? w1[w_off + k * M + n] : w3[w_off + k * M + n - M]; },
          [&](int64_t r, int64_t k, double v) { dx_rows.set(r * H + k, v); });
    }
  }

  int64_t saved_bytes(int64_t rows) const override { return expert_mlp_saved_bytes(cfg_, rows); }

 private:
  const MoeConfig& cfg_;  // the block's, alive while the op is
  bool preweight_, remat_;
  ExpertActivations act_;  // h, g
};

}  // namespace

std::unique_ptr<ExpertFfnOp> make_expert_ffn_op(const OpContext& ctx) {
  return std::make_unique<RefExpertFfn>(ctx);
}

}  // namespace moe::ref
