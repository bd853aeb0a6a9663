// The routed experts' SwiGLU MLP on the CPU for quant_mode none: grouped oneDNN GEMMs (cpu/gemm/gemm.h)
// around the SwiGLU kernel, forward and backward, every impl (fused w13 or not, preweight) and remat
// mode. Reference: src/ref/expert_ffn.cpp.
#pragma once

#include <memory>

#include "cpu/gemm/gemm.h"
#include "moe/ops.h"

namespace moe::cpu {

std::unique_ptr<ExpertFfnOp> make_float_expert_ffn(const OpContext& ctx, GemmKernels& gemm);
// impl ref_dp (src/cpu/ops/expert_ffn_ref_dp.cpp): the seed's DP baseline, per-block weight copies and
// padded blocks multiplied; its backward is JAX's autodiff of that (per-block weight gradients summed).
std::unique_ptr<ExpertFfnOp> make_ref_dp_expert_ffn(const OpContext& ctx, GemmKernels& gemm);

}  // namespace moe::cpu
