// The cuda backend's ops, one file each with the src/cpu/ names (src/cuda/dispatch.cu, convert.cu).
#pragma once

#include <memory>

#include "moe/backend.h"
#include "moe/ops.h"

namespace moe::cuda {

std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx);
// dst = src element-wise between float32 and bfloat16 (any pair), on the backend's stream.
void convert(Tensor& dst, const Tensor& src);

}  // namespace moe::cuda
