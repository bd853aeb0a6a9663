// The cuda backend's ops, one file each with the src/cpu/ names (src/cuda/pack.cu, dispatch.cu,
// expert_ffn.cu, combine.cu, shared_expert.cu, convert.cu, loss.cu). Ops that multiply take the
// backend's cuBLAS (cuda/blas.h).
#pragma once

#include <memory>

#include "moe/backend.h"
#include "moe/ops.h"

namespace moe::cuda {

class Blas;

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx);
std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx);
std::unique_ptr<ExpertFfnOp> make_expert_ffn_op(const OpContext& ctx, Blas& blas);
std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx);
std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx, Blas& blas);

// dst = src element-wise between float32, bfloat16 and float16 (any pair), on the backend's stream.
void convert(Tensor& dst, const Tensor& src);
void convert(void* dst, Dtype dst_dtype, const void* src, Dtype src_dtype, int64_t n);

// The seed's loss gradient over `count` elements of which y holds some (moe/backend.h): dy f32 =
// 2 y / count, sum_sq (1) f64 = sum of y^2 (summed in f64 in a fixed order); partials (>= kLossPartials)
// f64 scratch.
inline constexpr int kLossPartials = 512;
void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count, Tensor& partials);

}  // namespace moe::cuda
