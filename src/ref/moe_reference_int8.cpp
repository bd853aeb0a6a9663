#include <cmath>

#include "moe/quantize.h"
#include "ref/ref.h"
#include "ref/reference_int8.h"

namespace moe {

QuantizedRow quantize_row(const double* v, int64_t n, Dtype dt) {
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float(round_to_dtype(v[i], dt));
  QuantizedRow r{std::vector<int8_t>(static_cast<size_t>(n)), 0.0f};
  ref_quant::quantize_rows(r.q.data(), &r.scale, f.data(), Dtype::f32, 1, n, n);
  return r;
}

double dequantize_sum(int64_t sum, float row_scale, float weight_scale) {
  return double(float(float(float(sum) * row_scale) * weight_scale));
}

namespace {

void quantize_experts(std::vector<int8_t>& q, std::vector<float>& s, const std::vector<double>& first,
                      const std::vector<double>* second, int64_t E, int64_t Kd, int64_t N) {
  std::vector<float> a(first.begin(), first.end()), b;
  if (second) b.assign(second->begin(), second->end());
  q.resize(size_t(E * Kd * N));
  s.resize(size_t(E));
  ref_quant::quantize_experts(q.data(), s.data(),
                              second ? ExpertWeights(a.data(), b.data()) : ExpertWeights(a.data()),
                              Dtype::f32, E, Kd, N);
}

}  // namespace

Int8RoutedReference::Int8RoutedReference(const MoeConfig& cfg, const std::vector<double>& w1,
                                         const std::vector<double>& w3, const std::vector<double>& w2)
    : dt_(cfg.dtype),
      fused_(impl_traits(cfg.impl).fuse_w13),
      preweight_(impl_traits(cfg.impl).preweight),
      H_(cfg.hidden),
      M_(cfg.mlp_dim) {
  const int64_t E = cfg.experts;
  if (fused_) {
    quantize_experts(q13_, s13_, w1, &w3, E, H_, 2 * M_);
  } else {
    quantize_experts(q1_, s1_, w1, nullptr, E, H_, M_);
    quantize_experts(q3_, s3_, w3, nullptr, E, H_, M_);
  }
  quantize_experts(q2_, s2_, w2, nullptr, E, M_, H_);
}

int64_t Int8RoutedReference::up(int64_t e, int part, int64_t k, int64_t n) const {
  if (fused_) return q13_[size_t((e * H_ + k) * 2 * M_ + part * M_ + n)];
  return (part ? q3_ : q1_)[size_t((e * H_ + k) * M_ + n)];
}
float Int8RoutedReference::up_scale(int64_t e, int part) const {
  return fused_ ? s13_[size_t(e)] : (part ? s3_ : s1_)[size_t(e)];
}

void Int8RoutedReference::row_forward(double* a, double* b, double* y, const double* x, int64_t e,
                                      double weight) const {
  const int64_t H = H_, M = M_;
  const QuantizedRow xq = quantize_row(x, H, dt_);
  std::vector<double> g(static_cast<size_t>(M));
  for (int64_t n = 0; n < M; ++n) {
    double h[2];
    for (int part = 0; part < 2; ++part) {
      int64_t sum = 0;
      for (int64_t k = 0; k < H; ++k) sum += int64_t(xq.q[size_t(k)]) * up(e, part, k, n);
      h[part] = round_to_dtype(dequantize_sum(sum, xq.scale, up_scale(e, part)), dt_);
    }
    a[n] = h[0];
    b[n] = h[1];
    g[size_t(n)] = ref::silu(h[0]) * h[1] * (preweight_ ? weight : 1.0);
  }
  const QuantizedRow gq = quantize_row(g.data(), M, dt_);
  for (int64_t j = 0; j < H; ++j) {
    int64_t sum = 0;
    for (int64_t n = 0; n < M; ++n) sum += int64_t(gq.q[size_t(n)]) * q2_[size_t((e * M + n) * H + j)];
    y[j] += (preweight_ ? 1.0 : weight) * round_to_dtype(dequantize_sum(sum, gq.scale, s2_[size_t(e)]), dt_);
  }
}

void Int8RoutedReference::row_backward(double* da, double* db, double* dx, const double* dy, const double* a,
                                       const double* b, int64_t e, double weight) const {
  const int64_t H = H_, M = M_;
  // The row's incoming gradient as the combine's backward stores it (the weight applied there, or in
  // SwiGLU's backward for preweight impls).
  std::vector<double> dyr(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) dyr[size_t(j)] = (preweight_ ? 1.0 : weight) * dy[j];
  const QuantizedRow dyq = quantize_row(dyr.data(), H, dt_);
  std::vector<double> dh(static_cast<size_t>(2 * M));  // [dgate | dup] as stored
  for (int64_t n = 0; n < M; ++n) {
    int64_t sum = 0;
    for (int64_t j = 0; j < H; ++j) sum += int64_t(dyq.q[size_t(j)]) * q2_[size_t((e * M + n) * H + j)];
    const double dg =
        round_to_dtype(dequantize_sum(sum, dyq.scale, s2_[size_t(e)]), dt_) * (preweight_ ? weight : 1.0);
    dh[size_t(n)] = da[n] = round_to_dtype(dg * b[n] * ref::silu_grad(a[n]), dt_);
    dh[size_t(M + n)] = db[n] = round_to_dtype(dg * ref::silu(a[n]), dt_);
  }
  // [dgate | dup] quantized as one row against [w1 | w3] (fused), or each half against its own weight.
  const int parts = fused_ ? 1 : 2;
  const int64_t width = 2 * M / parts;
  for (int p = 0; p < parts; ++p) {
    const QuantizedRow dq = quantize_row(dh.data() + p * width, width, dt_);
    for (int64_t k = 0; k < H; ++k) {
      int64_t sum = 0;
      for (int64_t c = 0; c < width; ++c)
        sum += int64_t(dq.q[size_t(c)]) * up(e, fused_ ? int(c / M) : p, k, c % M);
      dx[k] += dequantize_sum(sum, dq.scale, up_scale(e, p));
    }
  }
}

}  // namespace moe
