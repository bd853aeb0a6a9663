// The shared expert on the CPU: dense oneDNN GEMMs with f32 activations (spec §2.5) around the
// SwiGLU kernel, forward and backward, fused [sw1|sw3] or not. Reference: src/ref/shared_expert.cpp.
#pragma once

#include <memory>

#include "cpu/gemm/gemm.h"
#include "moe/ops.h"

namespace moe::cpu {

std::unique_ptr<SharedExpertOp> make_shared_expert_op(const OpContext& ctx, GemmKernels& gemm);

}  // namespace moe::cpu
