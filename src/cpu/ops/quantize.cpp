// moe/quantize.h on the cpu backend: OpenMP over blocks, the bodies of cpu/ops/quantize_passes.h at the best
// ISA level this CPU reaches (cpu/ops/quantize_isa.h), and the build's baseline instance of them.
#include "moe/quantize.h"

#include "cpu/gemm/isa_pick.h"
#include "cpu/ops/quantize_isa.h"
#include "cpu/ops/quantize_passes.h"

namespace moe::cpu {

MOE_DEFINE_QUANTIZE_PASSES(baseline_quantize_passes)

const QuantizePasses& quantize_passes() {
  // Decided once, as the level (and MOE_MAX_ISA's cap) is read once per process.
  static const QuantizePasses chosen =
      best_passes_here(&baseline_quantize_passes, &avx2_quantize_passes, &avx512_bf16_quantize_passes);
  return chosen;
}

void quantize_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t rows, int64_t cols, int64_t ld_x,
                   bool transposed) {
  quantize_passes().rows(q, scale, x, dt, rows, cols, ld_x, transposed);
}

void quantize_experts(int8_t* q, float* scale, ExpertWeights w, Dtype dt, int64_t E, int64_t Kd, int64_t N,
                      bool transposed) {
  quantize_passes().experts(q, scale, w, dt, E, Kd, N, transposed);
}

void quantize_columns(int8_t* q, float* scale, const void* w, Dtype dt, int64_t Kd, int64_t N) {
  quantize_passes().columns(q, scale, w, dt, Kd, N);
}

void quantize_token_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t tokens, int64_t topk,
                         int64_t cols, const int32_t* assignment_row) {
  quantize_passes().token_rows(q, scale, x, dt, tokens, topk, cols, assignment_row);
}

}  // namespace moe::cpu
