// The `ref` backend's ops: each stage written plainly (scalar loops, float64 accumulation, any float
// storage dtype through Tensor::get/set), one file per op with the same name as its src/cpu/ kernel.
// They are the specification of the ops: every other backend's op is tested against them
// (tests/test_backend_ops.cpp). Intermediates are rounded where the fast ops store them (h, g and the
// expert rows in the run dtype, the shared expert's activations and every data gradient in f32), so
// the comparison measures the kernels and not the storage choices.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/ops.h"

namespace moe::ref {

double silu(double z);
double silu_grad(double z);  // d silu / dz

// c[rows_c, n] = sum_k a(r, k) * b(k, n) in float64 for the rows [row_begin, row_end) of a, with a
// and b given as element functions so callers can express transposes and fused layouts.
// (grouped_gemm: the group loop around it.)
template <typename A, typename B, typename Store>
void gemm_rows(int64_t row_begin, int64_t row_end, int64_t Kd, int64_t N, A&& a, B&& b, Store&& store) {
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t r = row_begin; r < row_end; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < Kd; ++k) {
      const double av = a(r, k);
      if (av != 0)
        for (int64_t n = 0; n < N; ++n) acc[size_t(n)] += av * b(k, n);
    }
    for (int64_t n = 0; n < N; ++n) store(r, n, acc[size_t(n)]);
  }
}

// out.out[t] = out.acc[t] (where it holds a start, else 0) + sum over token t's live rows r of weight(r) *
// rows[r], in float64: combine's forward and dispatch's backward.
template <typename Weight>
void sum_into_tokens(const TokenSums& out, const Tensor& rows, const HostPlan& p, Weight&& weight) {
  const int64_t H = out.out.dim(1), K = p.topk;
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double sum = out.acc_holds_start ? out.acc.get(t * H + h) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t r = p.assignment_row[t * K + k];
        if (r >= 0) sum += weight(r) * rows.get(r * H + h);
      }
      out.out.set(t * H + h, sum);
    }
}

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx);
std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx);
std::unique_ptr<ExpertFfnOp> make_expert_ffn_op(const OpContext& ctx);
std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx);
std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx);
// The int8 quant modes' ops (the routed modes' expert FFN; the shared expert of int8 and int8_all).
std::unique_ptr<ExpertFfnOp> make_int8_expert_ffn_op(const OpContext& ctx);
std::unique_ptr<SharedExpertOp> make_int8_shared_expert_op(const OpContext& ctx);

}  // namespace moe::ref
