// The routed rows of the float64 block reference (moe/reference.h) in the routed int8 quant modes
// (int8_routed, int8_all, int8_routed_prequant; spec §6): quantization-aware, sharing no code with the
// ops but the quantization rules of moe/quantize.h's reference. The same quantized values as the fast
// path (x per token; each intermediate per row, after rounding to the run dtype as the fast path stores
// it; weights per expert, [w1 | w3] together for fused impls), exact integer sums, the seed's float32
// dequantization; SwiGLU and every float sum in float64. Backward: the rule of docs/design.md ("Int8"):
// data gradients through int8 sums of the per-row quantized incoming gradient and the forward's quantized
// weights; the weight gradients stay float (the reference's own expert_weight_grads).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/config.h"

namespace moe {

// n values rounded to dt, quantized as one block (the reference's sym_int8).
struct QuantizedRow {
  std::vector<int8_t> q;
  float scale = 0;
};
QuantizedRow quantize_row(const double* v, int64_t n, Dtype dt);
// The seed's float32 dequantization of an exact integer sum.
double dequantize_sum(int64_t sum, float row_scale, float weight_scale);

class Int8RoutedReference {
 public:
  // w1, w3 (E, H, M) and w2 (E, M, H) as the run dtype stores them.
  Int8RoutedReference(const MoeConfig& cfg, const std::vector<double>& w1, const std::vector<double>& w3,
                      const std::vector<double>& w2);
  // One row of expert e: a, b (M) = the stored gate and up projections of x (H); y (H) += its output
  // times the routing weight.
  void row_forward(double* a, double* b, double* y, const double* x, int64_t e, double weight) const;
  // Its backward from dy (H), the token's loss gradient: da, db (M) as stored; dx (H) += the row's part.
  void row_backward(double* da, double* db, double* dx, const double* dy, const double* a, const double* b,
                    int64_t e, double weight) const;

 private:
  int64_t up(int64_t e, int part, int64_t k, int64_t n) const;  // quantized gate (0) / up (1) weight
  float up_scale(int64_t e, int part) const;

  Dtype dt_;
  bool fused_, preweight_;
  int64_t H_, M_;
  std::vector<int8_t> q13_, q1_, q3_, q2_;  // (E, H, 2M), (E, H, M) x 2, (E, M, H)
  std::vector<float> s13_, s1_, s3_, s2_;   // (E) each
};

// The shared expert's rows in the quant modes that quantize the dense GEMMs (int8, int8_all; AQT-like):
// x and each intermediate quantized per row as the fast path keeps them (x in the run dtype, the rest in
// float32), the weights per output column of each GEMM: sw1, sw3 and sw2 per column forward; for the
// backward's transposed GEMMs sw2 per row, and sw1 and sw3 per row apart (split) or [sw1 | sw3] per row
// together (fused). Exact integer sums, the seed's float32 dequantization.
class Int8SharedReference {
 public:
  // sw1, sw3 (H, S) and sw2 (S, H) as the run dtype stores them.
  Int8SharedReference(const MoeConfig& cfg, const std::vector<double>& sw1, const std::vector<double>& sw3,
                      const std::vector<double>& sw2);
  // One token: a, b (S) = the stored gate and up projections of x (H); y (H) += the shared output.
  void row_forward(double* a, double* b, double* y, const double* x) const;
  // Its backward from dy (H): da, db (S) as stored; dx (H) += the shared expert's part.
  void row_backward(double* da, double* db, double* dx, const double* dy, const double* a,
                    const double* b) const;

 private:
  Dtype dt_;
  bool fused_;
  int64_t H_, S_;
  std::vector<int8_t> q1_, q3_, q2_;           // per column: (H, S), (H, S), (S, H)
  std::vector<float> s1_, s3_, s2_;            // (S), (S), (H)
  std::vector<int8_t> r1_, r3_, r13_, r2_;     // per row: (H, S) x 2 split or (H, 2S) fused; (S, H)
  std::vector<float> rs1_, rs3_, rs13_, rs2_;  // (H) each, (S) for sw2
};

}  // namespace moe
