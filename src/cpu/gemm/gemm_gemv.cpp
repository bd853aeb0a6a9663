// The `gemv` variant: cpu/gemm/gemm.h's nn and nn_swiglu for groups of 1-64 rows, 1-128 on kept weights on
// the ymm instance (gemv_max_rows; decode steps, small micro-batches, EP ranks with few rows per expert),
// where the block is bound by reading expert weights, not by multiplying them. It reads each weight byte once
// in a call: where it lies, with no packing pass (dpbf16 packs each panel into its tile layout and reads it
// back, and at a few rows that traffic, not the arithmetic, sets the speed: 0.4-0.6 of a sequential read of
// the same weights, against 0.9 here at 1-4 rows), or from a packing made once for weights kept across calls.
//
// Work: items of (expert, weight part, its whole rows or a column chunk of them where the items are too few
// for two a thread), in contiguous runs a thread, so a thread streams an expert's weights in address order; a
// thread done with its run takes the back half of the largest run left (work_shares.h).
// An item walks its reduction in blocks of a few weight rows (the layer's block_depth: 8-32, fewer the fewer
// the rows); within a block, a register tile of columns at a time, the weight rows are multiplied by each
// live row's staged values. Sums wait in a per-thread float32 scratch between blocks; each line a block reads
// prefetches a line one or two blocks below it (blocks_ahead) into L2, so the DRAM stream runs ahead of the
// arithmetic. From the layer's kChunkRows rows (zmm: 5), where the arithmetic counts, an item is instead a
// chunk of a few column tiles (at most 512 KiB of weights, 256 KiB where its rows take several register
// blocks, less on a small L2: gemv_cpu) walked over its whole reduction at once, a register block of rows at
// a time, sums in registers, while the lines of the thread's next item are prefetched into L2 row by row,
// each register block its share (gemm_gemv_kernel.h). From 33 rows the arithmetic sets the speed; there the
// chunks still beat dpbf16's packed panels on streamed weights (64 rows kept: 0.83-0.93 against 0.78-0.85
// TF/s, moe_bench_few_rows 3 64, 2-core Zen 5), while from ~96 rows they run level and at 128 dpbf16 leads;
// the ymm instance on kept weights beats avx2's 6 x 16 GEMM to 128 rows (gemm_gemv.h). Weights kept across
// calls (ExpertWeights::packs: a forward run's) are packed once, on the first call, in tile order
// (gemm_gemv.h): an item's tiles are then one run of memory, walked tile by tile over the whole reduction
// with the lines 8 KiB ahead prefetched into L2. In place, a tile's rows lie a weight row apart and the
// chunks ran 0.61-0.81 of a sequential read at 8 rows; packed, 0.86-0.96 (moe_bench_few_rows 3 8, 2-core Zen
// 4). Instances: zmm (avx512/gemm_gemv_avx512.cpp: vdpbf16ps on bf16 pairs) where isa_level() reaches
// avx512_bf16, else ymm (avx2/gemm_gemv_avx2.cpp: bf16 widened to float32, vfmadd231ps).
//
// nt (groups of at most kGemvNtMaxRows): out's elements are dot products of a weight row and a dout row, both
// contiguous along N, so an item (64 weight rows of an expert) walks them where they lie, two at a time
// (gemm_gemv_nt_kernel.h); nt_swiglu_grad is nt and then SwiGLU's backward (gemm_detail's composition).
// Qwen3-30B-A3B's up projection (2048 x 1536), 1-8 rows an expert: 0.89-0.94 of a sequential read against
// oneDNN's 0.51-0.66 (2-core Zen 4).
//
// tn (groups of at most kGemvTnMaxRows): the weight gradient, a sum of a few scaled dout rows a gradient row,
// bound by writing it: tiles of rows x 32 columns from the group's staged operands, each row's line written
// with a streaming store (gemm_gemv_tn_kernel.h); tn_pair is tn twice. Qwen3's 2048 x 1536, 1-8 rows an
// expert: 35-57 GB/s of gradient written against dpbf16's 20-40 and avx2's 9-25 (2-core Zen 4).
//
// Arithmetic: products summed in float32 in the same order whatever the thread count, the output rounded
// once to nearest even (bf16) or stored as is (float32). nn_swiglu is nn into h, then one SwiGLU pass over
// the stored h of every row, or of the live rows where the caller keeps the padding (as the nn_then_swiglu
// composition computes it).
#include "cpu/gemm/gemm_gemv.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/tuning.h"
#include "cpu/ops/swiglu.h"
#include "moe/cpu_isa.h"

// The variant's entry points and answers: build-ISA code (the registry and --list call them on any CPU).
namespace moe::gemv {

using namespace gemm_detail;  // at, check_groups, group_rows, zero_padding_rows

namespace {

// A weight part's column tiles of `tile_cols` columns.
int64_t part_tiles(ExpertWeights rhs, int64_t N, int64_t tile_cols) {
  return (N / rhs.parts() + tile_cols - 1) / tile_cols;
}

// rhs (parts of (E, Kd, N / parts)) in tile order (cpu/gemm/gemm_gemv.h) of tiles `tile_cols` wide.
void pack_tiles(ExpertWeights rhs, int64_t E, int64_t Kd, int64_t N, int64_t tile_cols, uint8_t* dst) {
  const int64_t part_cols = N / rhs.parts(), tiles = part_tiles(rhs, N, tile_cols);
  const int64_t tile_row = tile_cols * 2, count = E * rhs.parts() * tiles;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = i % tiles, part = i / tiles % rhs.parts(), e = i / tiles / rhs.parts();
    const int64_t col0 = t * tile_cols, cols = std::min(tile_cols, part_cols - col0);
    const auto* src = static_cast<const uint8_t*>(rhs.part(int(part))) + (e * Kd * part_cols + col0) * 2;
    uint8_t* tile = dst + i * Kd * tile_row;
    for (int64_t k = 0; k < Kd; ++k)
      std::memcpy(tile + k * tile_row, src + k * part_cols * 2, size_t(cols) * 2);
  }
}

// rhs in tile order, packed on the first call with its packs (rhs.packs set).
const uint8_t* tiles_of(ExpertWeights rhs, int64_t E, int64_t Kd, int64_t N, int64_t tile_cols) {
  const std::string layout = "gemv tiles of " + std::to_string(tile_cols) + " columns";
  if (const uint8_t* found = rhs.packs->find(layout, rhs.first, E, Kd, N)) return found;
  const int64_t tiles = part_tiles(rhs, N, tile_cols);
  uint8_t* dst =
      rhs.packs->make(layout, rhs.first, E, Kd, N, size_t(E * rhs.parts() * tiles * Kd * tile_cols * 2));
  pack_tiles(rhs, E, Kd, N, tile_cols, dst);
  return dst;
}

// Whether this CPU runs the zmm instance (else the ymm one).
bool zmm_instance() {
  return isa_level() >= IsaLevel::avx512_bf16;
}

// Whether nn runs the zmm instance. Intel's vdpbf16ps runs at under half the rate of float32 FMAs (2-core AMX
// Xeon, --peak: 0.175 against 0.422 TF/s; AMD's at twice it), and nn is compute-bound there from ~8 rows: the
// ymm instance's widening FMAs read 0.49-0.82 of a sequential read at 8 rows in place against 0.10-0.35, 32
// rows 0.16-0.29 against 0.07-0.16 (moe_bench_few_rows 1 R gemv 64, alternately). Its nt and tn keep the zmm
// instance there: at 8 rows 0.42-1.52 and 0.64-1.02 of the read against the ymm's 0.36-0.97 and 0.33-0.59.
bool nn_zmm_instance() {
  return zmm_instance() && cpu_isa().vendor != "GenuineIntel";
}

// From how many live rows a walk over packed weights prefetches ahead into L2 (kPackedAheadBytes), where
// the hardware's prefetchers do not keep up alone: the one setting measured to differ between CPUs of one
// ISA level. Zen 5 (AMD family 26), from 1 row: 1-4 rows read 0.95-1.15 of a sequential read with it against
// 0.84-1.07 without (moe_bench_few_rows 3 1/2/4, memory at ~80 and ~54 GB/s). The zmm instance elsewhere from
// 5 rows, the Zen 4's (memory at ~52 / ~32 GB/s; x the read): 1 row 1.30 / 1.10 without, 0.86 / 0.92 with; 4
// rows 1.03 / 0.94 without, 0.79 / 0.92 with; 6 rows 0.93 / 0.93 without, 0.97 / 0.97 with. The ymm instance
// from 1 row: its arithmetic takes longer a weight line, and the hardware's prefetchers fall behind sooner
// (the Zen 4 held to AVX2, memory at ~34 GB/s: 4 rows 0.83-0.97 with, 0.69-0.77 without; 1-2 rows level).
int64_t packed_ahead_rows(bool zmm) {
  const CpuIsa& cpu = cpu_isa();
  return !zmm || (cpu.vendor == "AuthenticAMD" && cpu.family == 26) ? 1 : 5;
}

// A chunk's weights wait in L2 for the item before them while the thread's next chunk arrives beside them:
// at most 512 KiB, and 256 KiB where several register blocks share the chunk (each walks it once), so that
// the two fill half of a 1 MiB L2, not all of it (at Kd 2048, 32 rows kept, level with 512 KiB or up to 6 %
// faster: moe_bench_few_rows 3 32, 2-core Zen 5); on a smaller L2, a half and a quarter of it. The Zen 3's
// 512 KiB L2 (ymm, kept weights, alternately, moe_bench_few_rows 3 12 gemv, 64 experts; FMA peak ~0.18): in
// an hour the machine was busy, 12 rows (6 + 6) 0.134-0.178 TF/s with 256 KiB chunks against 0.156-0.184 with
// 128 KiB, 8 rows level; in a quiet one both 0.18-0.19.
GemvCpu gemv_cpu(bool zmm) {
  constexpr int64_t kKiB = 1024;
  static const int64_t l2 = int64_t(core_l2_cache_bytes());  // read once: sysfs files, not a call's work
  return {packed_ahead_rows(zmm), std::min(512 * kKiB, l2 / 2), std::min(256 * kKiB, l2 / 4)};
}

}  // namespace

void grouped_gemm_nn(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* lhs,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  check_groups(groups, Kd, N);
  MOE_CHECK(in_dtype == Dtype::bf16, "gemv takes bf16 inputs");
  const bool zmm = nn_zmm_instance();
  const auto nn = zmm ? &cpu::isa_avx512_bf16::gemv::nn : &cpu::isa_avx2::gemv::nn;
  const int64_t tile_cols =
      zmm ? cpu::isa_avx512_bf16::gemv::kTileColsOfInstance : cpu::isa_avx2::gemv::kTileColsOfInstance;
  const uint8_t* packed = rhs.packs && N > 0 ? tiles_of(rhs, groups.experts, Kd, N, tile_cols) : nullptr;
  nn(out, out_dtype == Dtype::bf16, static_cast<const bf16_t*>(lhs), rhs, packed, gemv_cpu(zmm), groups, Kd,
     N);
  zero_padding_rows(out, out_dtype, groups, N);
}

void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool /*keep_h*/) {
  grouped_gemm_nn(k, h, out_dtype, lhs, rhs, in_dtype, groups, Kd, 2 * M);
  // One pass over the groups' rows (a pass per group wakes the threads once per expert: 128 experts, 13 ms
  // of a 2 ms forward under a passive wait policy), then the padding rows' g as zeros whatever their weights
  // (unless the caller keeps them so: the pass then skips them too).
  cpu::swiglu_forward_groups(g, out_dtype, {h, at(h, M, out_dtype), 2 * M}, out_dtype, groups, M, row_weight);
  zero_padding_rows(g, out_dtype, groups, M);
}

void grouped_gemm_nt(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* dout,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     bool accumulate) {
  check_groups(groups, Kd, N);
  MOE_CHECK(in_dtype == Dtype::bf16, "gemv takes bf16 inputs");
  const auto nt = zmm_instance() ? &cpu::isa_avx512_bf16::gemv::nt : &cpu::isa_avx2::gemv::nt;
  if (N > 0)
    nt(out, out_dtype == Dtype::bf16, static_cast<const bf16_t*>(dout), rhs, groups, Kd, N, accumulate);
  if (N == 0 && !accumulate)  // an empty reduction: zero sums
    for (int64_t e = 0; e < groups.experts; ++e) {
      const GroupRows g = group_rows(groups, e);
      std::memset(at(out, g.row0 * Kd, out_dtype), 0, size_t(g.live * Kd) * dtype_size(out_dtype));
    }
  zero_padding_rows(out, out_dtype, groups, Kd);
}

void grouped_gemm_tn(const GemmThresholds& /*k*/, void* drhs, Dtype out_dtype, const void* lhs,
                     const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     int64_t ld_dout) {
  check_groups(groups, Kd, N);
  MOE_CHECK(in_dtype == Dtype::bf16, "gemv takes bf16 inputs");
  if (Kd == 0 || N == 0) return;
  const auto tn = zmm_instance() ? &cpu::isa_avx512_bf16::gemv::tn : &cpu::isa_avx2::gemv::tn;
  tn(drhs, out_dtype == Dtype::bf16, static_cast<const bf16_t*>(lhs), static_cast<const bf16_t*>(dout),
     groups, Kd, N, ld_dout);
}

std::string gemm_library_version() {
  if (!zmm_instance()) return "moe-bench row-streaming kernel (AVX2 FMA, ymm)";
  return nn_zmm_instance() ? "moe-bench row-streaming kernel (vdpbf16ps, zmm)"
                           : "moe-bench row-streaming kernel (vdpbf16ps, zmm; nn AVX2 FMA, ymm)";
}

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  const bool nt = call.form == GemmForm::nt || call.form == GemmForm::nt_swiglu_grad;
  const bool tn = call.form == GemmForm::tn || call.form == GemmForm::tn_pair;
  if (call.form != GemmForm::nn && call.form != GemmForm::nn_swiglu && !nt && !tn)
    return "nn, nn_swiglu, nt, nt_swiglu_grad, tn and tn_pair only";
  if (call.in_dtype != Dtype::bf16) return "bfloat16 inputs only";
  if (call.out_dtype != Dtype::bf16 && call.out_dtype != Dtype::f32)
    return "a float32 or bfloat16 output only";
  const int64_t most = nt ? kGemvNtMaxRows : tn ? kGemvTnMaxRows : gemv_max_rows(call.weights_kept);
  if (call.rows > most)
    return "a group of " + std::to_string(call.rows) + " rows, above its " + std::to_string(most);
  if (!nt && !tn && call.Kd == 0) return "an empty reduction";
  return "";
}

std::string unavailable() {
  return needs_isa(IsaLevel::avx2, "AVX2 and FMA");
}

// The zmm instance multiplies bf16 (vdpbf16ps); the ymm one widens it to float32 (nn's, on Intel).
bool bf16_arithmetic() {
  return zmm_instance();
}

bool same_sums_on_any_thread_count() {
  return true;  // threads split columns, never a sum
}

bool auto_candidate() {
  return true;
}

}  // namespace moe::gemv

namespace moe {
int64_t gemv_max_rows(bool weights_kept) {
  // In place, every instance stops at kGemvMaxRows; kept, at its own rows.
  if (!weights_kept) return kGemvMaxRows;
  return gemv::nn_zmm_instance() ? cpu::isa_avx512_bf16::gemv::kMaxRowsOfInstance
                                 : cpu::isa_avx2::gemv::kMaxRowsOfInstance;
}
}  // namespace moe
