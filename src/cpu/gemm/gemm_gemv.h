// The gemv variant's instances (cpu/gemm/gemm_gemv.cpp): nn, out (rows, N) = lhs (rows, Kd) @ rhs[e] over
// each group's live rows (at most gemv_max_rows(kept)), and nt, out (rows, Kd) = dout (rows, N) @ rhs[e]^T
// (at most kGemvNtMaxRows; two parts or accumulate: a float32 out), bf16 inputs, float32 or bf16 output
// (out_bf16).
#pragma once

#include <cstdint>

#include "moe/dtype.h"
#include "moe/grouped.h"

namespace moe {
// The largest group the variant takes (its supports()): nn's (gemv_max_rows(): kGemvMaxRows, more on kept
// weights on the ymm instance), nt's (its live rows' dout is read once a pair of weight rows: few rows only;
// on the real Zen 3 the ymm nt beat avx2's at 24 and 32 rows, 0.096-0.133 against 0.095-0.117 TF/s, and lost
// from 48, 0.123-0.135 against 0.132-0.146: moe_bench_few_rows 2 R gemv,avx2,onednn 64 nt) and tn's (avx2's
// led from 16 rows there: 0.085-0.108 against 0.063-0.097).
// nn on kept weights on the ymm instance: with the values staged by register block, 96 and 128 rows ran
// 0.141-0.187 TF/s against avx2's 0.140-0.166 (the real Zen 3, moe_bench_few_rows 2 R gemv,avx2 64, two
// sessions; 192 and 256 rows level to 1.13x, not taken). The block, forward (moe-bench --model M --tokens T
// --with-peak, alternately): OLMoE T 512 0.130-0.144 -> 0.164-0.166 TF/s, Qwen3 T 1024 0.147-0.153 ->
// 0.166-0.178. Read in place it lost there (96 rows 0.138-0.159 against 0.157-0.160), and the zmm instance
// stops at 64 (on a Zen 5 dpbf16 ran level at 96 rows and led at 128).
inline constexpr int64_t kGemvMaxRows = 64;
inline constexpr int64_t kGemvYmmKeptMaxRows = 128;
int64_t gemv_max_rows(bool weights_kept);  // nn's on this CPU's instance (isa_level())
inline constexpr int64_t kGemvNtMaxRows = 32;
inline constexpr int64_t kGemvTnMaxRows = 16;

// What nn's walks take from the CPU they run on (gemm_gemv.cpp measures why): from how many live rows a walk
// over packed weights prefetches ahead, and the most weights a chunk holds while the thread's next one
// arrives beside it in L2, walked by one register block or shared by several.
struct GemvCpu {
  int64_t packed_ahead_rows;
  int64_t chunk_bytes, shared_chunk_bytes;
};
}  // namespace moe

// packed: rhs in tile order, or nullptr (read in place). Tile order, what gemv keeps of weights kept across
// calls (ExpertWeights::packs): per expert and part, column tiles of the instance's kTileColsOfInstance
// columns, a tile's Kd rows contiguous, (E, parts, part tiles, Kd, kTileColsOfInstance) bf16, the last tile's
// columns past the part zero.
namespace moe::cpu::isa_avx512_bf16::gemv {
inline constexpr int64_t kTileColsOfInstance = 32;
inline constexpr int64_t kMaxRowsOfInstance = kGemvMaxRows;
void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, const uint8_t* packed,
        const GemvCpu& cpu, GroupedShape groups, int64_t Kd, int64_t N);
void nt(void* out, bool out_bf16, const bf16_t* dout, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
        int64_t N, bool accumulate);
void tn(void* drhs, bool out_bf16, const bf16_t* lhs, const bf16_t* dout, GroupedShape groups, int64_t Kd,
        int64_t N, int64_t ld_dout);
}  // namespace moe::cpu::isa_avx512_bf16::gemv

namespace moe::cpu::isa_avx2::gemv {
inline constexpr int64_t kTileColsOfInstance = 16;
inline constexpr int64_t kMaxRowsOfInstance = kGemvYmmKeptMaxRows;
void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, const uint8_t* packed,
        const GemvCpu& cpu, GroupedShape groups, int64_t Kd, int64_t N);
void nt(void* out, bool out_bf16, const bf16_t* dout, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
        int64_t N, bool accumulate);
void tn(void* drhs, bool out_bf16, const bf16_t* lhs, const bf16_t* dout, GroupedShape groups, int64_t Kd,
        int64_t N, int64_t ld_dout);
}  // namespace moe::cpu::isa_avx2::gemv
