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

// What an expert FFN's forward stores for its backward, as the fast ops store it: h (max_rows, 2M)
// [gate | up] and g (max_rows, M) in the run dtype, sized for the worst routing of ctx.
struct ExpertActivations {
  explicit ExpertActivations(const OpContext& ctx);
  Tensor h, g;
};

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx);
std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx);
std::unique_ptr<ExpertFfnOp> make_expert_ffn_op(const OpContext& ctx);
std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx);
std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx);
// The int8 quant modes' ops (the routed modes' expert FFN; the shared expert of int8 and int8_all).
std::unique_ptr<ExpertFfnOp> make_int8_expert_ffn_op(const OpContext& ctx);
std::unique_ptr<SharedExpertOp> make_int8_shared_expert_op(const OpContext& ctx);

}  // namespace moe::ref
