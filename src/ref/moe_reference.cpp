// The float64 reference of the MoE block (spec §2.5, §3.3-3.5): forward and hand-written backward.
// Written to be read: per token, per assignment, per element. The choices made for speed only: inner
// loops run along contiguous rows (dot products as simd reductions), and outer loops are OpenMP-parallel
// over outputs that no other iteration writes. Every sum is therefore accumulated in one order fixed at
// compile time, and results are bitwise identical on any thread count.
//
// The shared expert is an expert like the routed ones (w1/w3 (H, S), w2 (S, H), weight 1, every
// token), so both go through the same per-row helpers.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "moe/reference.h"
#include "ref/reference_int8.h"

namespace moe {
namespace {

double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}
double silu(double z) {
  return z * sigmoid(z);
}
double silu_grad(double z) {
  double s = sigmoid(z);
  return s * (1.0 + z * (1.0 - s));
}

// Below this much work (A·H·M + T·H·S multiply-adds, a third of the forward's), thread start-up and
// barriers cost more than the work itself; the finite-difference tests run thousands of tiny forwards.
constexpr int64_t kMinWorkForThreads = int64_t(1) << 16;

// One row processed by one expert: input token, row of the activation buffers, combine weight.
struct Row {
  int64_t token;
  int64_t act;
  double weight;
};

// Up projection of one row: a += x·w1, b += x·w3 (a and b arrive zeroed).
void up_proj(double* a,         // a  (N)
             double* b,         // b  (N)
             const double* x,   // x  (H)
             const double* w1,  // w1 (H, N)
             const double* w3,  // w3 (H, N)
             int64_t H, int64_t N) {
  for (int64_t h = 0; h < H; ++h) {
    const double xh = x[h];
    const double* w1h = w1 + h * N;
    const double* w3h = w3 + h * N;
    for (int64_t n = 0; n < N; ++n) {
      a[n] += xh * w1h[n];
      b[n] += xh * w3h[n];
    }
  }
}

// y += weight * (silu(a) ⊙ b)·w2.
void down_proj_acc(double* y,         // y  (H)
                   const double* a,   // a  (N)
                   const double* b,   // b  (N)
                   const double* w2,  // w2 (N, H)
                   double weight, int64_t N, int64_t H) {
  for (int64_t n = 0; n < N; ++n) {
    const double g = weight * silu(a[n]) * b[n];
    const double* w2n = w2 + n * H;
    for (int64_t h = 0; h < H; ++h) y[h] += g * w2n[h];
  }
}

// Backward of one row through down_proj_acc and up_proj: da, db (the gradients at a and b) and the
// row's contribution to dx.
void row_backward(double* da,        // da (N)
                  double* db,        // db (N)
                  double* dx,        // dx (H) accumulated
                  const double* dy,  // dy (H)
                  const double* a,   // a  (N)
                  const double* b,   // b  (N)
                  const double* w1,  // w1 (H, N)
                  const double* w3,  // w3 (H, N)
                  const double* w2,  // w2 (N, H)
                  double weight, int64_t H, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    const double* w2n = w2 + n * H;
    double dg = 0;
    // Dot products are latency-bound unless their sum is split into lanes; simd fixes that split at
    // compile time, so the order is still independent of the thread count.
#pragma omp simd reduction(+ : dg)
    for (int64_t h = 0; h < H; ++h) dg += w2n[h] * dy[h];
    dg *= weight;
    da[n] = dg * b[n] * silu_grad(a[n]);
    db[n] = dg * silu(a[n]);
  }
  for (int64_t h = 0; h < H; ++h) {
    const double* w1h = w1 + h * N;
    const double* w3h = w3 + h * N;
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t n = 0; n < N; ++n) acc += w1h[n] * da[n] + w3h[n] * db[n];
    dx[h] += acc;
  }
}

// One expert's weight gradients, summed over its rows in row order:
//   dw1[h][n] = Σ_i x[t_i][h] da[i][n],  dw3 likewise with db,  dw2[n][h] = Σ_i w_i silu(a)b[i][n]
//   dy[t_i][h].
// Parallel over the output rows h (dw1, dw3) and n (dw2), so no two threads write the same element.
void expert_weight_grads(double* dw1,  // dw1 (H, N) overwritten
                         double* dw3,  // dw3 (H, N) overwritten
                         double* dw2,  // dw2 (N, H) overwritten
                         const std::vector<Row>& rows,
                         const double* x,   // x  (T, H)
                         const double* dy,  // dy (T, H)
                         const double* a,   // a  (rows, N) indexed by Row::act
                         const double* b,   // b  (rows, N)
                         const double* da,  // da (rows, N)
                         const double* db,  // db (rows, N)
                         int64_t H, int64_t N, bool threaded) {
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t h = 0; h < H; ++h) {
    double* dw1h = dw1 + h * N;
    double* dw3h = dw3 + h * N;
    std::fill(dw1h, dw1h + N, 0.0);
    std::fill(dw3h, dw3h + N, 0.0);
    for (const Row& r : rows) {
      const double xh = x[r.token * H + h];
      const double* dar = da + r.act * N;
      const double* dbr = db + r.act * N;
      for (int64_t n = 0; n < N; ++n) {
        dw1h[n] += xh * dar[n];
        dw3h[n] += xh * dbr[n];
      }
    }
  }
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    double* dw2n = dw2 + n * H;
    std::fill(dw2n, dw2n + H, 0.0);
    for (const Row& r : rows) {
      const double g = r.weight * silu(a[r.act * N + n]) * b[r.act * N + n];
      const double* dyt = dy + r.token * H;
      for (int64_t h = 0; h < H; ++h) dw2n[h] += g * dyt[h];
    }
  }
}

// kept[a] for every flat assignment a = t*K + k. Spec §3.3 ranks a row within its expert after a
// stable sort by expert id, which is its position among that expert's assignments in flat order; the
// row survives iff that rank < cap. Drop and pad keep the same rows (pad only changes buffer shapes).
// Null ids (>= E) are no expert's rows and are never kept.
std::vector<char> kept_assignments(const MoeConfig& cfg, const Routing& r) {
  const int64_t A = r.tokens * r.topk;
  const int64_t cap = cfg.capacity_active() ? cfg.capacity() : A;
  std::vector<int64_t> seen(size_t(cfg.experts), 0);
  std::vector<char> kept(size_t(A), 0);
  for (int64_t a = 0; a < A; ++a) {
    const int32_t e = r.ids[size_t(a)];
    MOE_CHECK(e >= 0, "negative expert id at assignment " + std::to_string(a));
    if (e >= cfg.experts) continue;
    kept[size_t(a)] = seen[size_t(e)] < cap;
    ++seen[size_t(e)];
  }
  return kept;
}

}  // namespace

ReferenceParams reference_params(const MoeInputs& in) {
  return ReferenceParams{in.x.to_f64(),   in.w1.to_f64(),  in.w3.to_f64(), in.w2.to_f64(),
                         in.sw1.to_f64(), in.sw3.to_f64(), in.sw2.to_f64()};
}

ReferenceResult reference_forward(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                  bool with_grads) {
  return reference_forward(cfg, reference_params(in), routing, with_grads);
}

namespace {

void check_shapes(const MoeConfig& cfg, const ReferenceParams& p, const Routing& routing) {
  const int64_t T = cfg.tokens, H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts, K = cfg.topk;
  const int64_t S = cfg.shared_expert_dim, A = T * K;
  MOE_CHECK(T > 0 && H > 0 && M > 0 && E > 0 && K > 0 && S >= 0, "reference: dimensions must be positive");
  MOE_CHECK(p.x.size() == size_t(T * H), "reference: x is not (T, H)");
  MOE_CHECK(p.w1.size() == size_t(E * H * M) && p.w3.size() == p.w1.size(),
            "reference: w1/w3 are not (E, H, M)");
  MOE_CHECK(p.w2.size() == size_t(E * M * H), "reference: w2 is not (E, M, H)");
  MOE_CHECK(p.sw1.size() == size_t(H * S) && p.sw3.size() == size_t(H * S) && p.sw2.size() == size_t(S * H),
            "reference: shared weights are not (H, S) / (S, H)");
  MOE_CHECK(routing.tokens == T && routing.topk == K && routing.experts == E,
            "reference: routing shape mismatch");
  MOE_CHECK(routing.ids.size() == size_t(A) && routing.weights.size() == size_t(A),
            "reference: routing ids/weights are not (T, K)");
}

// The block in float64, token by token: forward keeps the activations the backward reads (routed rows by
// flat assignment, shared rows by token), backward the rows' gradients the weight gradients sum.
class BlockReference {
 public:
  BlockReference(const MoeConfig& cfg, const ReferenceParams& p, const Routing& routing)
      : p_(p),
        routing_(routing),
        T(cfg.tokens),
        H(cfg.hidden),
        M(cfg.mlp_dim),
        E(cfg.experts),
        K(cfg.topk),
        S(cfg.shared_expert_dim),
        A(T * K),
        kept_(kept_assignments(cfg, routing)),
        threaded_(A * H * M + T * H * S >= kMinWorkForThreads),
        act_a_(size_t(A * M), 0.0),
        act_b_(size_t(A * M), 0.0),
        sh_a_(size_t(T * S), 0.0),
        sh_b_(size_t(T * S), 0.0) {
    // The int8 modes' rows: routed (int8_routed, int8_all, int8_routed_prequant), shared (int8, int8_all).
    if (routed_int8(cfg.quant_mode)) int8_.emplace(cfg, p.w1, p.w3, p.w2);
    if (quantizes_dense(cfg.quant_mode) && S > 0) int8_shared_.emplace(cfg, p.sw1, p.sw3, p.sw2);
  }

  void forward(ReferenceResult& res) {
    res.out.assign(size_t(T * H), 0.0);
#pragma omp parallel for schedule(static) if (threaded_)
    for (int64_t t = 0; t < T; ++t) forward_token(t, res.out.data() + t * H);
    double sum_sq = 0;
    for (double v : res.out) sum_sq += v * v;
    res.loss = sum_sq / double(T * H);
  }

  void backward(ReferenceResult& res) {
    // d loss / d y = 2 y / (T*H); routing weights are constants.
    dy_.resize(size_t(T * H));  // (T, H)
    for (size_t i = 0; i < dy_.size(); ++i) dy_[i] = 2.0 * res.out[i] / double(T * H);
    res.has_grads = true;
    res.dx.assign(size_t(T * H), 0.0);
    d_a_.assign(size_t(A * M), 0.0);  // (A, M)
    d_b_.assign(size_t(A * M), 0.0);
    dsh_a_.assign(size_t(T * S), 0.0);  // (T, S)
    dsh_b_.assign(size_t(T * S), 0.0);
#pragma omp parallel for schedule(static) if (threaded_)
    for (int64_t t = 0; t < T; ++t) backward_token(t, res.dx.data() + t * H);
    weight_grads(res);
  }

 private:
  double weight_of(int64_t a) const {
    return double(routing_.weights[size_t(a)]);
  }

  void forward_token(int64_t t, double* yt) {
    const double* xt = p_.x.data() + t * H;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t a = t * K + k;
      if (!kept_[size_t(a)]) continue;
      const int64_t e = routing_.ids[size_t(a)];
      double* aa = act_a_.data() + a * M;
      double* ab = act_b_.data() + a * M;
      if (int8_) {
        int8_->row_forward(aa, ab, yt, xt, e, weight_of(a));
        continue;
      }
      up_proj(aa, ab, xt, p_.w1.data() + e * H * M, p_.w3.data() + e * H * M, H, M);
      down_proj_acc(yt, aa, ab, p_.w2.data() + e * M * H, weight_of(a), M, H);
    }
    if (S == 0) return;
    double* sa = sh_a_.data() + t * S;
    double* sb = sh_b_.data() + t * S;
    if (int8_shared_) {
      int8_shared_->row_forward(sa, sb, yt, xt);
    } else {
      up_proj(sa, sb, xt, p_.sw1.data(), p_.sw3.data(), H, S);
      down_proj_acc(yt, sa, sb, p_.sw2.data(), 1.0, S, H);
    }
  }

  void backward_token(int64_t t, double* dxt) {
    const double* dyt = dy_.data() + t * H;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t a = t * K + k;
      if (!kept_[size_t(a)]) continue;
      const int64_t e = routing_.ids[size_t(a)];
      if (int8_) {
        int8_->row_backward(d_a_.data() + a * M, d_b_.data() + a * M, dxt, dyt, act_a_.data() + a * M,
                            act_b_.data() + a * M, e, weight_of(a));
        continue;
      }
      row_backward(d_a_.data() + a * M, d_b_.data() + a * M, dxt, dyt, act_a_.data() + a * M,
                   act_b_.data() + a * M, p_.w1.data() + e * H * M, p_.w3.data() + e * H * M,
                   p_.w2.data() + e * M * H, weight_of(a), H, M);
    }
    if (S > 0 && int8_shared_) {
      int8_shared_->row_backward(dsh_a_.data() + t * S, dsh_b_.data() + t * S, dxt, dyt, sh_a_.data() + t * S,
                                 sh_b_.data() + t * S);
    } else if (S > 0) {
      row_backward(dsh_a_.data() + t * S, dsh_b_.data() + t * S, dxt, dyt, sh_a_.data() + t * S,
                   sh_b_.data() + t * S, p_.sw1.data(), p_.sw3.data(), p_.sw2.data(), 1.0, H, S);
    }
  }

  // Each expert's rows in flat order, so its weight gradients sum in a fixed order.
  void weight_grads(ReferenceResult& res) {
    std::vector<std::vector<Row>> rows(static_cast<size_t>(E));
    for (int64_t a = 0; a < A; ++a)
      if (kept_[size_t(a)]) rows[size_t(routing_.ids[size_t(a)])].push_back(Row{a / K, a, weight_of(a)});
    res.dw1.resize(size_t(E * H * M));
    res.dw3.resize(size_t(E * H * M));
    res.dw2.resize(size_t(E * M * H));
    for (int64_t e = 0; e < E; ++e)
      expert_weight_grads(res.dw1.data() + e * H * M, res.dw3.data() + e * H * M, res.dw2.data() + e * M * H,
                          rows[size_t(e)], p_.x.data(), dy_.data(), act_a_.data(), act_b_.data(), d_a_.data(),
                          d_b_.data(), H, M, threaded_);
    res.dsw1.resize(size_t(H * S));
    res.dsw3.resize(size_t(H * S));
    res.dsw2.resize(size_t(S * H));
    if (S == 0) return;
    std::vector<Row> shared_rows(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) shared_rows[size_t(t)] = Row{t, t, 1.0};
    expert_weight_grads(res.dsw1.data(), res.dsw3.data(), res.dsw2.data(), shared_rows, p_.x.data(),
                        dy_.data(), sh_a_.data(), sh_b_.data(), dsh_a_.data(), dsh_b_.data(), H, S,
                        threaded_);
  }

  const ReferenceParams& p_;
  const Routing& routing_;
  const int64_t T, H, M, E, K, S, A;
  const std::vector<char> kept_;
  const bool threaded_;
  std::optional<Int8RoutedReference> int8_;
  std::optional<Int8SharedReference> int8_shared_;
  std::vector<double> act_a_, act_b_;  // (A, M) the routed rows' activations
  std::vector<double> sh_a_, sh_b_;    // (T, S) the shared rows'
  std::vector<double> dy_;             // (T, H)
  std::vector<double> d_a_, d_b_;      // (A, M)
  std::vector<double> dsh_a_, dsh_b_;  // (T, S)
};

}  // namespace

ReferenceResult reference_forward(const MoeConfig& cfg, const ReferenceParams& p, const Routing& routing,
                                  bool with_grads) {
  check_shapes(cfg, p, routing);
  BlockReference block(cfg, p, routing);
  ReferenceResult res;
  block.forward(res);
  if (with_grads) block.backward(res);
  return res;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  MOE_CHECK(a.size() == b.size(), "relative_error: sizes differ");
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-300);
}

}  // namespace moe
