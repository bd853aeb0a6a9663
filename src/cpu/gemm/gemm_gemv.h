// The gemv variant's instances (cpu/gemm/gemm_gemv.cpp): out (rows, N) = lhs (rows, Kd) @ rhs[e] over each
// group's live rows (at most kGemvMaxRows), bf16 inputs, float32 or bf16 output (out_bf16).
#pragma once

#include <cstdint>

#include "moe/dtype.h"
#include "moe/grouped.h"

namespace moe {
// The largest group the variant takes (its supports()).
inline constexpr int64_t kGemvMaxRows = 32;
}  // namespace moe

namespace moe::cpu::isa_avx512_bf16::gemv {
void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
        int64_t N);
}  // namespace moe::cpu::isa_avx512_bf16::gemv

namespace moe::cpu::isa_avx2::gemv {
void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
        int64_t N);
}  // namespace moe::cpu::isa_avx2::gemv
