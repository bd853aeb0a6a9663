// The `gemv` variant's work (src/cpu/gemm/gemm_gemv.cpp says what it computes and why): items, blocks,
// scratch and the thread split, shared by its ISA instances, which give a register layer L:
//   kBlockRows (live rows a register block), kTileCols (columns a register tile), kStep (reduction elements
//   one staged value holds: a bf16 pair 2, a float 1), Staged (that value's type),
//   stage(lhs, Kd, live, k0, depth, x): weight rows [k0, k0 + depth) of each live row into x (step s of row r
//   at x[s * kMaxRows + r]; an odd last pair's second element zero),
//   tile<R>(job, tile): one column tile of a block for R live rows.
// and define their instance's nn with MOE_DEFINE_GEMV_NN(L).
// Include after the ISA's target pragma with MOE_GEMV_NS naming the instance's namespace (one per ISA), so
// that all of it is that ISA's code (docs/design.md, "ISA levels").
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "cpu/gemm/gemm_gemv.h"
#include "cpu/gemm/gemm_variants.h"

namespace MOE_GEMV_NS {

constexpr int64_t kMaxRows = kGemvMaxRows;
// An item's columns: a weight part's whole rows, so an item's blocks are contiguous runs of memory, unless
// that leaves a thread without two items or a row is wider than this.
constexpr int64_t kMaxChunkCols = 2048;
constexpr int64_t kMaxDepth = 32;
// How far ahead a block's reads prefetch, in blocks: two blocks measured 0.77-0.86 of the read at 8 rows
// against 0.71-0.78 at one (moe_bench_few_rows 3 8, 2-core Zen 4), level or better at 1 and 4 rows.
constexpr int64_t kBlocksAhead = 2;

// Weight rows a block walks (column tile by column tile) before its sums go to scratch: few rows keep few
// DRAM streams open, more rows spend less on the sums' trips to scratch, which counts more the more rows the
// group has. Measured on 2-core Zen 4 (64 experts x 2048 x 1536 bf16, against a sequential read of the same
// weights in the same process): 1-4 rows 0.89-0.90 of the read at 8 weight rows (0.85 at 16, 0.75 at 32);
// 8 rows 0.77 at 16 (0.70 at 8); 12 rows 0.69 at 32 (0.63 at 16).
inline int64_t block_depth(int64_t live) {
  return live <= 4 ? 8 : live <= 8 ? 16 : kMaxDepth;
}

// A block's view of its operands, for one register block of rows and every column tile of an item.
template <class Staged>
struct BlockJob {
  const char* w;         // weight row k0 at the item's first column
  int64_t ld_bytes;      // weight rows' distance
  int64_t steps;         // whole steps (kStep weight rows each)
  bool odd;              // one more weight row, paired with zeros (kStep 2)
  int64_t prefetch_off;  // bytes from a line read to the line to prefetch (0: none)
  int64_t tiles;         // column tiles, the last one's live columns tail_cols
  int64_t tail_cols;
  const Staged* x;  // lhs: step s of row r at x[s * kMaxRows + r]
  float* sums;      // partial sums: tile t's row r at sums + t * sums_tile + r * kTileCols
  int64_t sums_tile;
  bool first, last;  // the reduction's first block (sums start at zero) / last (store the output)
  char* out;         // last: tile t's row r at out + (t * kTileCols + r * out_ld) elements
  int64_t out_ld;
  bool out_bf16;
};

// One tile of a block: its weights, live columns (kTileCols but in an item's last tile), partial sums and
// output.
struct Tile {
  const char* w;
  int64_t cols;
  float* sums;
  char* out;
};

// A block over every column tile of an item, for R live rows.
template <class L, int R>
void run_block(const BlockJob<typename L::Staged>& j) {
  const int64_t elem = j.out_bf16 ? 2 : 4;
  for (int64_t t = 0; t < j.tiles; ++t)
    L::template tile<R>(j, {j.w + t * L::kTileCols * 2, t + 1 < j.tiles ? L::kTileCols : j.tail_cols,
                            j.sums + t * j.sums_tile, j.out + t * L::kTileCols * elem});
}

template <class L, int... R>
constexpr std::array<void (*)(const BlockJob<typename L::Staged>&), sizeof...(R)> blocks_by_rows(
    std::integer_sequence<int, R...>) {
  return {&run_block<L, R + 1>...};
}
template <class L>
constexpr auto kBlocks = blocks_by_rows<L>(std::make_integer_sequence<int, L::kBlockRows>());

// An item: `live` rows of expert e's group (from row0) x columns [col0, col0 + cols) of weight part `part`.
struct Item {
  int64_t e, row0, live;
  int part;
  int64_t col0, cols;
};

struct Call {
  void* out;  // (rows, N)
  bool out_bf16;
  const bf16_t* lhs;  // (rows, Kd)
  ExpertWeights rhs;  // parts of (E, Kd, N / parts)
  int64_t Kd, N;
};

// Floats of a column tile's partial sums for `live` rows: a row of the tile each and a line more, so that
// tiles are not a power of two bytes apart (at 32 rows of 32 columns they were 4 KiB apart, as the rows of a
// weight 2048 columns wide: every tile's sums and every weight line a block reads in one L1 set).
template <class L>
int64_t tile_sums(int64_t live) {
  return live * L::kTileCols + 16;
}

// One item, block by block of its reduction.
template <class L>
void run_item(const Call& c, const Item& it, float* sums, typename L::Staged* x) {
  const int64_t part_cols = c.N / c.rhs.parts(), ld_bytes = part_cols * 2;
  const char* w0 = static_cast<const char*>(c.rhs.part(it.part)) + (it.e * c.Kd * part_cols + it.col0) * 2;
  const int64_t out_col = it.part * part_cols + it.col0, elem = c.out_bf16 ? 2 : 4;
  const int64_t block = block_depth(it.live);
  const int64_t tiles = (it.cols + L::kTileCols - 1) / L::kTileCols;
  for (int64_t k0 = 0; k0 < c.Kd; k0 += block) {
    const int64_t depth = std::min(block, c.Kd - k0);
    L::stage(c.lhs + it.row0 * c.Kd, c.Kd, it.live, k0, depth, x);
    // The lines kBlocksAhead blocks below, where that block is a whole one (a short last block is not worth
    // its own case).
    const int64_t prefetch = k0 + (kBlocksAhead + 1) * block <= c.Kd ? kBlocksAhead * block * ld_bytes : 0;
    for (int64_t r0 = 0; r0 < it.live; r0 += L::kBlockRows) {
      const int rows = int(std::min<int64_t>(L::kBlockRows, it.live - r0));
      const BlockJob<typename L::Staged> j{
          w0 + k0 * ld_bytes,
          ld_bytes,
          depth / L::kStep,
          depth % L::kStep != 0,
          r0 == 0 ? prefetch : 0,
          tiles,
          it.cols - (tiles - 1) * L::kTileCols,
          x + r0,
          sums + r0 * L::kTileCols,
          tile_sums<L>(it.live),
          k0 == 0,
          k0 + depth == c.Kd,
          static_cast<char*>(c.out) + ((it.row0 + r0) * c.N + out_col) * elem,
          c.N,
          c.out_bf16};
      kBlocks<L>[size_t(rows - 1)](j);
    }
  }
}

// A thread's scratch, kept across calls: allocating it per call cost a page fault per 4 KiB of sums and the
// unmapping's TLB shootdown (sums of 8 live rows x 1536 columns are 48 KiB; glibc maps 128 KiB and more).
// Types of this namespace only: the standard library code instantiated for them is this ISA's alone
// (scripts/check-isa-isolation.sh).
struct alignas(64) SumSlot {
  float lanes[16];
};
template <class L>
struct Scratch {
  std::vector<SumSlot> sums;                               // per column tile: (rows, kTileCols) and a line
  std::array<typename L::Staged, kMaxDepth * kMaxRows> x;  // (kMaxDepth / kStep, kMaxRows)
};
template <class L>
Scratch<L>& thread_scratch() {
  static thread_local Scratch<L> scratch;
  return scratch;
}

// The columns of an item of a part `part_cols` wide: whole rows (at most kMaxChunkCols) unless `items` whole
// parts leave a thread of `threads` without two, whole column tiles either way.
template <class L>
int64_t chunk_cols(int64_t part_cols, int64_t items, int threads) {
  const int64_t tiles = (part_cols + L::kTileCols - 1) / L::kTileCols;
  int64_t chunks =
      std::max((part_cols + kMaxChunkCols - 1) / kMaxChunkCols, (2 * threads + items - 1) / items);
  chunks = std::clamp<int64_t>(chunks, 1, tiles);
  return (tiles + chunks - 1) / chunks * L::kTileCols;
}

// out (rows, N) = lhs (rows, Kd) @ rhs[e] over each group's live rows (at most kMaxRows), bf16 inputs.
template <class L>
void nn_with(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
             int64_t N) {
  const Call c{out, out_bf16, lhs, rhs, Kd, N};
  const int64_t part_cols = N / rhs.parts();
  int64_t live_experts = 0;
  for (int64_t e = 0; e < groups.experts; ++e) live_experts += gemm_detail::group_rows(groups, e).live > 0;
  if (live_experts == 0 || part_cols == 0) return;
  const int threads = omp_get_max_threads();
  const int64_t chunk = chunk_cols<L>(part_cols, live_experts * rhs.parts(), threads);
  std::vector<Item> items;
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    if (g.live == 0) continue;
    MOE_CHECK(g.live <= kMaxRows, "a gemv group above its rows");
    for (int part = 0; part < rhs.parts(); ++part)
      for (int64_t col = 0; col < part_cols; col += chunk)
        items.push_back({e, g.row0, g.live, part, col, std::min(chunk, part_cols - col)});
  }
  const int64_t count = int64_t(items.size());
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    Scratch<L>& scratch = thread_scratch<L>();
    const size_t vectors = size_t(chunk / L::kTileCols * tile_sums<L>(kMaxRows) / 16);
    if (scratch.sums.size() < vectors) scratch.sums.resize(vectors);
    for (int64_t i = count * t / n; i < count * (t + 1) / n; ++i)
      run_item<L>(c, items[size_t(i)], reinterpret_cast<float*>(scratch.sums.data()), scratch.x.data());
  }
}

}  // namespace MOE_GEMV_NS

// The instance's nn (cpu/gemm/gemm_gemv.h) on layer L, in the enclosing namespace.
#define MOE_DEFINE_GEMV_NN(L)                                                                              \
  void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd, \
          int64_t N) {                                                                                     \
    nn_with<L>(out, out_bf16, lhs, rhs, groups, Kd, N);                                                    \
  }
