// The shared expert in the quant modes that quantize the dense GEMMs (int8, int8_all; spec §6, AQT-like,
// docs/design.md "Int8"): x and every intermediate quantized per row, the weights per output column
// (of the GEMM at hand, so the backward's transposed weights per row of the forward's), int32 sums by
// the kernel table's nn_s8 over one group, float32 activations, float weight gradients.
#pragma once

#include <memory>

#include "cpu/ops/expert_ffn_int8.h"
#include "moe/ops.h"

namespace moe::cpu {

std::unique_ptr<SharedExpertOp> make_int8_shared_expert(const OpContext& ctx, Int8Kernels kernels);

}  // namespace moe::cpu
