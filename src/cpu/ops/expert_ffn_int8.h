// The routed experts' SwiGLU MLP for the routed int8 quant modes (spec §6, docs/design.md "Int8"):
// int8_routed and int8_all (weights quantized inside every call) and int8_routed_prequant (weights
// quantized once, outside the timed calls, read from FfnWeights). The GEMMs are the kernel table's
// nn_s8 (true int8 arithmetic, int32 sums); SwiGLU and the weight gradients stay in float.
#pragma once

#include <memory>

#include "cpu/gemm/gemm.h"
#include "moe/ops.h"

namespace moe::cpu {

// What an int8 op computes with: a kernel table (the cpu backend's, or one that runs the reference rows
// only: its nn_s8_swiglu then runs SwiGLU in float64) and a quantization (moe/quantize.h: cpu:: or
// ref_quant::, bitwise equal).
struct Int8Kernels {
  GemmKernels& gemm;
  void (*quantize_rows)(int8_t*, float*, const void*, Dtype, int64_t, int64_t, int64_t, bool);
  void (*quantize_experts)(int8_t*, float*, ExpertWeights, Dtype, int64_t, int64_t, int64_t, bool);
  void (*quantize_columns)(int8_t*, float*, const void*, Dtype, int64_t, int64_t);
  void (*quantize_token_rows)(int8_t*, float*, const void*, Dtype, int64_t, int64_t, int64_t, const int32_t*);
};
Int8Kernels cpu_int8_kernels(GemmKernels& gemm);

std::unique_ptr<ExpertFfnOp> make_int8_expert_ffn(const OpContext& ctx, Int8Kernels kernels);

}  // namespace moe::cpu
