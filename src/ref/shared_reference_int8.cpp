#include "moe/quantize.h"
#include "ref/ref.h"
#include "ref/reference_int8.h"

namespace moe {
namespace {

std::vector<float> floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

void per_column(std::vector<int8_t>& q, std::vector<float>& s, const std::vector<float>& w, int64_t Kd,
                int64_t N) {
  q.resize(size_t(Kd * N));
  s.resize(size_t(N));
  ref_quant::quantize_columns(q.data(), s.data(), w.data(), Dtype::f32, Kd, N);
}
void per_row(std::vector<int8_t>& q, std::vector<float>& s, const std::vector<float>& w, int64_t rows,
             int64_t cols) {
  q.resize(size_t(rows * cols));
  s.resize(size_t(rows));
  ref_quant::quantize_rows(q.data(), s.data(), w.data(), Dtype::f32, rows, cols, cols);
}

}  // namespace

Int8SharedReference::Int8SharedReference(const MoeConfig& cfg, const std::vector<double>& sw1,
                                         const std::vector<double>& sw3, const std::vector<double>& sw2)
    : dt_(cfg.dtype), fused_(cfg.shared_fused), H_(cfg.hidden), S_(cfg.shared_expert_dim) {
  const int64_t H = H_, S = S_;
  const std::vector<float> w1 = floats(sw1), w3 = floats(sw3), w2 = floats(sw2);
  // Per-column scales see one column each, so fused and split quantize the forward alike.
  per_column(q1_, s1_, w1, H, S);
  per_column(q3_, s3_, w3, H, S);
  per_column(q2_, s2_, w2, S, H);
  per_row(r2_, rs2_, w2, S, H);
  if (fused_) {
    std::vector<float> w13(size_t(H * 2 * S));
    for (int64_t k = 0; k < H; ++k)
      for (int64_t n = 0; n < S; ++n) {
        w13[size_t(k * 2 * S + n)] = w1[size_t(k * S + n)];
        w13[size_t(k * 2 * S + S + n)] = w3[size_t(k * S + n)];
      }
    per_row(r13_, rs13_, w13, H, 2 * S);
  } else {
    per_row(r1_, rs1_, w1, H, S);
    per_row(r3_, rs3_, w3, H, S);
  }
}

void Int8SharedReference::row_forward(double* a, double* b, double* y, const double* x) const {
  const int64_t H = H_, S = S_;
  const QuantizedRow xq = quantize_row(x, H, dt_);
  std::vector<double> g(static_cast<size_t>(S));
  for (int64_t n = 0; n < S; ++n) {
    int64_t sum1 = 0, sum3 = 0;
    for (int64_t k = 0; k < H; ++k) {
      sum1 += int64_t(xq.q[size_t(k)]) * q1_[size_t(k * S + n)];
      sum3 += int64_t(xq.q[size_t(k)]) * q3_[size_t(k * S + n)];
    }
    a[n] = dequantize_sum(sum1, xq.scale, s1_[size_t(n)]);
    b[n] = dequantize_sum(sum3, xq.scale, s3_[size_t(n)]);
    g[size_t(n)] = ref::silu(a[n]) * b[n];
  }
  const QuantizedRow gq = quantize_row(g.data(), S, Dtype::f32);
  for (int64_t j = 0; j < H; ++j) {
    int64_t sum = 0;
    for (int64_t n = 0; n < S; ++n) sum += int64_t(gq.q[size_t(n)]) * q2_[size_t(n * H + j)];
    y[j] += dequantize_sum(sum, gq.scale, s2_[size_t(j)]);
  }
}

void Int8SharedReference::row_backward(double* da, double* db, double* dx, const double* dy, const double* a,
                                       const double* b) const {
  const int64_t H = H_, S = S_;
  const QuantizedRow dyq = quantize_row(dy, H, Dtype::f32);
  std::vector<double> dh(static_cast<size_t>(2 * S));  // [dgate | dup] as stored (float32)
  for (int64_t n = 0; n < S; ++n) {
    int64_t sum = 0;
    for (int64_t j = 0; j < H; ++j) sum += int64_t(dyq.q[size_t(j)]) * r2_[size_t(n * H + j)];
    const double ds = dequantize_sum(sum, dyq.scale, rs2_[size_t(n)]);
    dh[size_t(n)] = da[n] = double(float(ds * b[n] * ref::silu_grad(a[n])));
    dh[size_t(S + n)] = db[n] = double(float(ds * ref::silu(a[n])));
  }
  if (fused_) {
    const QuantizedRow dq = quantize_row(dh.data(), 2 * S, Dtype::f32);
    for (int64_t k = 0; k < H; ++k) {
      int64_t sum = 0;
      for (int64_t c = 0; c < 2 * S; ++c) sum += int64_t(dq.q[size_t(c)]) * r13_[size_t(k * 2 * S + c)];
      dx[k] += dequantize_sum(sum, dq.scale, rs13_[size_t(k)]);
    }
    return;
  }
  for (int part = 0; part < 2; ++part) {
    const QuantizedRow dq = quantize_row(dh.data() + part * S, S, Dtype::f32);
    const std::vector<int8_t>& r = part ? r3_ : r1_;
    const std::vector<float>& rs = part ? rs3_ : rs1_;
    for (int64_t k = 0; k < H; ++k) {
      int64_t sum = 0;
      for (int64_t n = 0; n < S; ++n) sum += int64_t(dq.q[size_t(n)]) * r[size_t(k * S + n)];
      dx[k] += dequantize_sum(sum, dq.scale, rs[size_t(k)]);
    }
  }
}

}  // namespace moe
