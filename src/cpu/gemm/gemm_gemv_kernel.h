// The `gemv` variant's work (src/cpu/gemm/gemm_gemv.cpp says what it computes and why): items, blocks,
// scratch and the thread split, shared by its ISA instances, which give a register layer L:
//   kBlockRows (live rows a register block), kTileCols (columns a register tile), kStep (reduction elements
//   one staged value holds: a bf16 pair 2, a float 1), Staged (that value's type), kChunkRows (from this
//   many live rows an item is a chunk of columns walked over its whole reduction at once: its sums stay in
//   registers while the thread's next item is prefetched into L2 row by row; kMaxRows + 1: never; packed
//   weights are walked so at any row count),
//   stage(lhs, Kd, live, k0, depth, x): weight rows [k0, k0 + depth) of each live row into x (step s of row r
//   at x[s * live + r]; an odd last pair's second element zero),
//   tile<R>(job, tile): one column tile of a block for R live rows, prefetching the lines of the tile's
//   PrefetchCursor (a step per weight row it reads; a plain RowPrefetch where those lie a fixed distance on),
//   kTilesAtOnce<R> and, where that is over 1, tile_group<R>(job, tiles): that many tiles walked side by side
//   where the layer can (then true, else false and nothing done),
//   block_depth(live): weight rows a block of `live` rows walks (at most kMaxDepth) before its sums go to
//   scratch (in place, under kChunkRows rows), and blocks_ahead(depth) how many blocks below it the lines
//   it prefetches into L2 lie,
//   chunk_last_rows(last, blocks): a chunk's last register block's rows where blocks of kBlockRows would
//   leave it `last` (the block before takes the rest of the two's),
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
#include "cpu/gemm/work_shares.h"

namespace MOE_GEMV_NS {

constexpr int64_t kMaxRows = kMaxRowsOfInstance;
// An item's columns: a weight part's whole rows, so an item's blocks are contiguous runs of memory, unless
// that leaves a thread without two items or a row is wider than this.
constexpr int64_t kMaxChunkCols = 2048;
constexpr int64_t kMaxDepth = 32;
// A chunk's tiles at most (its weights at most GemvCpu's chunk bytes: gemm_gemv.cpp).
constexpr int64_t kChunkTiles = 4;
// How far ahead of its reads a walk over packed weights (one run of memory) prefetches into L2, from the
// call's GemvCpu::packed_ahead_rows live rows (gemm_gemv.cpp says why per CPU). 8 rows on a 2-core Zen 4
// (memory at ~52 / ~32 GB/s; x the read): 0.78 / 0.97 without, 0.98 / 0.98 at 8 KiB, 1.00 / 0.92 at 16 KiB;
// Zen 5, 1-4 rows: 16 KiB 0.88-1.03, 4 KiB 0.91-1.04, 8 KiB 0.95-1.10.
constexpr int64_t kPackedAheadBytes = int64_t(8) << 10;

// A run of weight lines to prefetch, row by row: `segs` lines of a row, then the next row `ld` bytes on; a
// line every `every` steps.
struct PrefetchCursor {
  const char* row;  // nullptr: none
  int64_t seg, segs, ld;
  int64_t every = 1, tick = 0;
  [[gnu::always_inline]] void step() {
    if (row == nullptr || ++tick < every) return;
    tick = 0;
    __builtin_prefetch(row + seg * 64, 0, 2);  // into L2 (prefetcht1)
    if (++seg == segs) {
      seg = 0;
      row += ld;
    }
  }
  // Whether it moves along one run of memory `bytes` a step (or prefetches nothing): then a walk may issue
  // the same lines itself, a line every 64 / bytes steps.
  bool runs_along(int64_t bytes) const { return row == nullptr || (segs == 1 && ld == bytes * every); }
  // Whether it prefetches a line a weight row at a fixed distance from the rows a walk reads (`row_bytes`
  // apart): RowPrefetch's case (the in-place blocks', L::blocks_ahead blocks below).
  bool follows_rows(int64_t row_bytes) const {
    return row != nullptr && segs == 1 && every == 1 && ld == row_bytes;
  }
};

// A line every `ld` bytes from `row` (nullptr: none, which its user tests): a PrefetchCursor that follows the
// rows (follows_rows) or runs along a run of memory (the walks of packed runs), without the bookkeeping,
// which holds scalar registers enough to spill sums (the ymm instance's 6-row walk spilled three). Weights in
// place, x the read, alternately (moe_bench_few_rows 3 R gemv, "gemv"; 2-core Zen 4, "fast" memory at 45-55
// GB/s): zmm 1 row 0.80-1.03 -> 0.87-0.99 (slow), 4 rows 0.63-0.91 -> 0.72-0.88 (fast), 0.79-0.94 ->
// 0.82-0.98 (slow); held to AVX2, 4 rows 0.52-0.71 -> 0.60-0.78, 6 rows 0.42-0.64 -> 0.54-0.69 (slow).
struct RowPrefetch {
  const char* row;
  int64_t ld;
  [[gnu::always_inline]] void step() {
    __builtin_prefetch(row, 0, 2);  // into L2, as PrefetchCursor
    row += ld;
  }
};

// The lines a block prefetches into L2 as it reads weight rows, a line per `every` rows of each tile (nullptr
// base: none). tile_lines 0: tile t its own column of lines from base + its offset in the item, a row `ld`
// bytes apart (blocks, packed runs); else tile t the lines from line `first + t * tile_lines` of base's rows
// of `segs` lines `ld` bytes apart, row by row (chunks: the thread's next item).
struct PrefetchPlan {
  const char* base;
  int64_t segs, ld, first, tile_lines, every;
};

// A block's view of its operands, for one register block of rows and every column tile of an item.
template <class Staged>
struct BlockJob {
  const char* w;       // weight row k0 at the item's first column
  int64_t ld_bytes;    // weight rows' distance
  int64_t tile_bytes;  // column tiles' distance
  int64_t steps;       // whole steps (kStep weight rows each)
  bool odd;            // one more weight row, paired with zeros (kStep 2)
  PrefetchPlan prefetch;
  int64_t tiles;  // column tiles, the last one's live columns tail_cols
  int64_t tail_cols;
  const Staged* x;   // lhs: step s of row r at x[s * x_stride + r]
  int64_t x_stride;  // the block's rows (stage_blocks)
  int64_t live;      // the item's rows, in all its register blocks
  float* sums;       // partial sums: tile t's row r at sums + t * sums_tile + r * kTileCols
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
  PrefetchCursor prefetch;
};

// Tile t's share of a block's prefetch, the tile `offset` bytes into its rows: a line per weight row it
// reads.
inline PrefetchCursor tile_prefetch(const PrefetchPlan& p, int64_t t, int64_t offset) {
  if (p.base == nullptr) return {nullptr, 0, 1, p.ld};
  if (p.tile_lines == 0) return {p.base + offset, 0, 1, p.ld, p.every};
  const int64_t line = p.first + p.tile_lines * t;
  return {p.base + line / p.segs * p.ld, line % p.segs, p.segs, p.ld, p.every};
}

// A tile's R rows of sums at its block's start, two vectors of Sum a row (row r's at sums + r * tile_cols):
// zeros (the reduction's first block) or the partial sums kept.
template <class Sum, int R>
[[gnu::always_inline]] inline void start_sums(Sum (&acc)[R][2], bool first, const float* sums,
                                              int64_t tile_cols) {
  constexpr int64_t kLanes = sizeof(Sum) / sizeof(float);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      acc[r][v] = Sum{};
      if (!first) __builtin_memcpy(&acc[r][v], sums + r * tile_cols + kLanes * v, sizeof(Sum));
    }
}

// A tile's R rows of sums kept for its next block.
template <class Sum, int R>
[[gnu::always_inline]] inline void keep_sums(const Sum (&acc)[R][2], float* sums, int64_t tile_cols) {
  constexpr int64_t kLanes = sizeof(Sum) / sizeof(float);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) __builtin_memcpy(sums + r * tile_cols + kLanes * v, &acc[r][v], sizeof(Sum));
}

// A tile by the layer's walk (L::walk<R, whole tile, prefetch>): a ragged tile's or one whose prefetch does
// not follow the rows with the cursor, else with RowPrefetch.
template <class L, int R>
void walk_with_prefetch(const BlockJob<typename L::Staged>& j, const Tile& t) {
  if (t.cols != L::kTileCols) return L::template walk<R, false>(j, t, t.prefetch);
  if (t.prefetch.follows_rows(j.ld_bytes))
    return L::template walk<R, true>(j, t, RowPrefetch{t.prefetch.row, j.ld_bytes});
  L::template walk<R, true>(j, t, t.prefetch);
}

// A block over every column tile of an item, for R live rows: L::kTilesAtOnce<R> at a time where the layer
// walks them so (L::tile_group), else one by one.
template <class L, int R>
void run_block(const BlockJob<typename L::Staged>& j) {
  const int64_t elem = j.out_bf16 ? 2 : 4;
  auto tile = [&](int64_t t) -> Tile {
    return {j.w + t * j.tile_bytes, t + 1 < j.tiles ? L::kTileCols : j.tail_cols, j.sums + t * j.sums_tile,
            j.out + t * L::kTileCols * elem, tile_prefetch(j.prefetch, t, t * j.tile_bytes)};
  };
  int64_t t = 0;
  if constexpr (constexpr int64_t G = L::template kTilesAtOnce<R>; G > 1)
    for (; t + G <= j.tiles; t += G) {
      std::array<Tile, G> group;
      for (int64_t i = 0; i < G; ++i) group[size_t(i)] = tile(t + i);
      if (!L::template tile_group<R>(j, group)) break;
    }
  for (; t < j.tiles; ++t) L::template tile<R>(j, tile(t));
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
  // rhs in tile order (cpu/gemm/gemm_gemv.h), or nullptr: read in place.
  const uint8_t* packed;  // (E, parts, part tiles, Kd, kTileCols)
  GemvCpu cpu;
};

// A part's column tiles.
template <class L>
int64_t part_tiles(const Call& c) {
  return (c.N / c.rhs.parts() + L::kTileCols - 1) / L::kTileCols;
}

// Floats of a column tile's partial sums for `live` rows: a row of the tile each and a line more, so that
// tiles are not a power of two bytes apart (at 32 rows of 32 columns they were 4 KiB apart, as the rows of a
// weight 2048 columns wide: every tile's sums and every weight line a block reads in one L1 set).
template <class L>
int64_t tile_sums(int64_t live) {
  return live * L::kTileCols + 16;
}

// Where an item's weights start: expert e's rows of part `part` at column col0 (in place), or that column
// tile's (packed).
template <class L>
const char* item_weights(const Call& c, const Item& it) {
  if (c.packed) {
    const int64_t tile = (it.e * c.rhs.parts() + it.part) * part_tiles<L>(c) + it.col0 / L::kTileCols;
    return reinterpret_cast<const char*>(c.packed) + tile * c.Kd * L::kTileCols * 2;
  }
  const int64_t part_cols = c.N / c.rhs.parts();
  return static_cast<const char*>(c.rhs.part(it.part)) + (it.e * c.Kd * part_cols + it.col0) * 2;
}

// Whether an item walks its whole reduction at once (a chunk): packed weights (one run of memory), or
// L::kChunkRows live rows and more.
template <class L>
bool walks_whole(const Call& c, int64_t live) {
  return c.packed != nullptr || live >= L::kChunkRows;
}

// Register blocks of an item's `live` rows, and block b's rows: L::kBlockRows each but, in a chunk
// (`chunk`), where that leaves a last block with too few sums in flight to fill the multiply pipes: there the
// last two share their rows as the layer's chunk_last_rows says. Blocks of a few weight rows (the ymm layer
// in place) keep kBlockRows: 8 rows as 6 + 2 ran 0.15-0.20 TF/s, as 4 + 4 0.14-0.17 (a Zen 5 held to AVX2).
template <class L>
int64_t register_blocks(int64_t live) {
  return (live + L::kBlockRows - 1) / L::kBlockRows;
}
template <class L>
int64_t block_rows(int64_t live, int64_t blocks, int64_t b, bool chunk) {
  const int64_t last = live - (blocks - 1) * L::kBlockRows;  // the last block's rows, blocks of kBlockRows
  if (b + 1 < blocks - 1) return L::kBlockRows;
  const int64_t shared_last = chunk && blocks > 1 ? L::chunk_last_rows(last, blocks) : last;
  return b + 1 == blocks ? shared_last : L::kBlockRows + last - shared_last;
}

// The lines of an item's weights: its tiles' rows one run of memory (packed), or Kd rows of `segs` lines.
template <class L>
int64_t next_item_lines(const Call& c, const Item& it, int64_t segs) {
  if (!c.packed) return c.Kd * segs;
  return ((it.cols + L::kTileCols - 1) / L::kTileCols * c.Kd * L::kTileCols * 2 + 63) / 64;
}

// The lines block b of `blocks` prefetches as it walks weight rows [k0, k0 + depth) of the item's `tiles`
// tiles (from w0, rows ld_bytes apart). A chunk (chunk: its whole reduction at once) with a next item: that
// item's lines, each block an equal share spread over its walk (a line per `blocks` weight rows where a row
// is a line, per 2 x `blocks` where it is half of one: the ymm layer's packing), so that the next chunk
// streams in evenly while this one is walked once a block (a first block fetching all of it left DRAM idle
// while the others ran: 32 rows kept 0.69-0.78 TF/s, spread 0.84-0.87; in place 0.31-0.55 against 0.34-0.70;
// moe_bench_few_rows 3 32, 2-core Zen 5, alternately in one process). Packed otherwise: kPackedAheadBytes on
// in the run of memory. Blocks: the lines L::blocks_ahead(depth) blocks below, where that block is a whole
// one (a short last block is not worth its own case).
template <class L>
PrefetchPlan block_prefetch(const Call& c, const Item& it, const Item* next, bool chunk, const char* w0,
                            int64_t k0, int64_t depth, int64_t ld_bytes, int64_t tiles, int64_t b,
                            int64_t blocks) {
  const PrefetchPlan none{nullptr, 1, ld_bytes, 0, 0, 1};
  if (chunk && next && (!c.packed || blocks > 1)) {
    const int64_t rows = depth / L::kStep * L::kStep;                // the weight rows a tile steps through
    const int64_t segs = c.packed ? 1 : (next->cols * 2 + 63) / 64;  // lines of a row of the next item's
    const int64_t share = (next_item_lines<L>(c, *next, segs) + blocks * tiles - 1) / (blocks * tiles);
    return {item_weights<L>(c, *next), segs,  c.packed ? 64 : ld_bytes,
            b * tiles * share,         share, (rows + share - 1) / share};
  }
  if (b > 0) return none;
  if (c.packed)
    return it.live >= c.cpu.packed_ahead_rows ? PrefetchPlan{w0 + kPackedAheadBytes, 1, ld_bytes, 0, 0, 1}
                                              : none;
  const int64_t ahead = L::blocks_ahead(depth);
  if (chunk || k0 + (ahead + 1) * depth > c.Kd) return none;
  return {w0 + (k0 + ahead * depth) * ld_bytes, 1, ld_bytes, 0, 0, 1};
}

// Weight rows [k0, k0 + depth) of `live` rows into x register block by register block (block_rows): a
// block's steps of its rows together (step s of its row r at x[r0 * steps + s * rows + r]), so that a
// register block's walk reads its own values only, not a line of every row's a step: with all rows' values
// of a step side by side, a chunk's 64 rows at Kd 2048 are 512 KiB of lines, the Zen 3's whole L2. The real
// Zen 3 (kept weights, moe_bench_few_rows 3 R gemv 64, TF/s of the four shapes, alternately; FMA peak
// ~0.19): 64 rows 0.083-0.175 -> 0.167-0.187, 32 rows 0.141-0.181 -> 0.148-0.186, 8 rows level; in the
// block (moe-bench --model M --tokens 512 --with-peak) OLMoE 0.147-0.149 -> 0.158-0.159, Qwen3 0.167-0.168
// -> 0.180-0.181.
template <class L>
void stage_blocks(const bf16_t* lhs, int64_t Kd, int64_t live, int64_t k0, int64_t depth,
                  typename L::Staged* x, bool chunk) {
  const int64_t blocks = register_blocks<L>(live), steps = (depth + L::kStep - 1) / L::kStep;
  for (int64_t b = 0, r0 = 0, rows = 0; b < blocks; ++b, r0 += rows) {
    rows = block_rows<L>(live, blocks, b, chunk);
    L::stage(lhs + r0 * Kd, Kd, rows, k0, depth, x + r0 * steps);
  }
}

// One item, block by block of its reduction, or (a chunk: L::kChunkRows live rows and more) all of it at once
// while prefetching `next` (the thread's next item, or nullptr). x holds the item's rows staged over the
// whole reduction (a chunk) or is staged a block at a time.
template <class L>
void run_item(const Call& c, const Item& it, const Item* next, float* sums, typename L::Staged* x) {
  const int64_t part_cols = c.N / c.rhs.parts();
  const int64_t ld_bytes = c.packed ? L::kTileCols * 2 : part_cols * 2;
  const int64_t tile_bytes = c.packed ? c.Kd * ld_bytes : L::kTileCols * 2;
  const char* w0 = item_weights<L>(c, it);
  const int64_t out_col = it.part * part_cols + it.col0, elem = c.out_bf16 ? 2 : 4;
  const bool chunk = walks_whole<L>(c, it.live);
  const int64_t block = chunk ? c.Kd : L::block_depth(it.live);
  const int64_t tiles = (it.cols + L::kTileCols - 1) / L::kTileCols;
  const int64_t blocks = register_blocks<L>(it.live);
  for (int64_t k0 = 0; k0 < c.Kd; k0 += block) {
    const int64_t depth = std::min(block, c.Kd - k0);
    if (!chunk) stage_blocks<L>(c.lhs + it.row0 * c.Kd, c.Kd, it.live, k0, depth, x, false);
    const int64_t steps = (depth + L::kStep - 1) / L::kStep;
    for (int64_t b = 0, r0 = 0, rows = 0; b < blocks; ++b, r0 += rows) {
      rows = block_rows<L>(it.live, blocks, b, chunk);
      const BlockJob<typename L::Staged> j{
          w0 + k0 * ld_bytes,
          ld_bytes,
          tile_bytes,
          depth / L::kStep,
          depth % L::kStep != 0,
          block_prefetch<L>(c, it, next, chunk, w0, k0, depth, ld_bytes, tiles, b, blocks),
          tiles,
          it.cols - (tiles - 1) * L::kTileCols,
          x + r0 * steps,
          rows,
          it.live,
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
template <class T>
struct StagedSlot {
  T value;
};
template <class L>
struct Scratch {
  std::vector<SumSlot> sums;  // per column tile: (rows, kTileCols) and a line
  // A block's or a chunk's whole reduction of staged lhs (steps, live) and whose rows they are (a thread's
  // chunks of one expert share them; nullptr: none).
  std::vector<StagedSlot<typename L::Staged>> x;
  const bf16_t* staged_rows = nullptr;
  int64_t staged_live = 0;
};
template <class L>
Scratch<L>& thread_scratch() {
  static thread_local Scratch<L> scratch;
  return scratch;
}

// The columns of an item of a part `part_cols` wide for `live` rows: a chunk walked at once (`whole`: at most
// the CPU's chunk bytes of weights, or its shared chunk bytes where the rows take several register blocks,
// whole tiles), or whole rows (at most kMaxChunkCols) unless `items` whole parts leave a thread of `threads`
// without two, whole column tiles either way.
template <class L>
int64_t chunk_cols(const Call& c, int64_t live, bool whole, int64_t items, int threads) {
  const int64_t Kd = c.Kd, part_cols = c.N / c.rhs.parts();
  const int64_t tiles = (part_cols + L::kTileCols - 1) / L::kTileCols;
  if (whole) {
    const int64_t most = register_blocks<L>(live) > 1 ? c.cpu.shared_chunk_bytes : c.cpu.chunk_bytes;
    int64_t chunk_tiles = kChunkTiles;
    while (chunk_tiles > 1 && chunk_tiles * L::kTileCols * 2 * Kd > most) chunk_tiles /= 2;
    return std::min(chunk_tiles, tiles) * L::kTileCols;
  }
  int64_t chunks =
      std::max((part_cols + kMaxChunkCols - 1) / kMaxChunkCols, (2 * threads + items - 1) / items);
  chunks = std::clamp<int64_t>(chunks, 1, tiles);
  return (tiles + chunks - 1) / chunks * L::kTileCols;
}

// Stages a chunk's rows over the whole reduction unless the thread's last chunk staged the same rows.
template <class L>
typename L::Staged* staged_rows(Scratch<L>& s, const Call& c, const Item& it) {
  const bf16_t* rows = c.lhs + it.row0 * c.Kd;
  auto* x = reinterpret_cast<typename L::Staged*>(s.x.data());
  if (!walks_whole<L>(c, it.live)) {
    s.staged_rows = nullptr;  // run_item stages a block at a time over it
  } else if (s.staged_rows != rows || s.staged_live != it.live) {
    stage_blocks<L>(rows, c.Kd, it.live, 0, c.Kd, x, true);
    s.staged_rows = rows;
    s.staged_live = it.live;
  }
  return x;
}

// Thread t's items, each prefetching the next while it runs (taken before it runs: it is surely this
// thread's).
template <class L>
void run_items(const Call& c, const std::vector<Item>& items, gemm_detail::WorkShares& shares, int t,
               int64_t max_chunk) {
  Scratch<L>& s = thread_scratch<L>();
  const size_t vectors = size_t(max_chunk / L::kTileCols * tile_sums<L>(kMaxRows) / 16);
  if (s.sums.size() < vectors) s.sums.resize(vectors);
  const size_t staged = size_t(std::max<int64_t>(c.Kd + L::kStep, kMaxDepth) / L::kStep * kMaxRows);
  if (s.x.size() < staged) s.x.resize(staged);
  s.staged_rows = nullptr;  // a new call's rows
  for (int64_t i = shares.next(t), next = 0; i >= 0; i = next) {
    next = shares.next(t);
    const Item& it = items[size_t(i)];
    run_item<L>(c, it, next >= 0 ? &items[size_t(next)] : nullptr, reinterpret_cast<float*>(s.sums.data()),
                staged_rows(s, c, it));
  }
}

// out (rows, N) = lhs (rows, Kd) @ rhs[e] over each group's live rows (at most kMaxRows), bf16 inputs.
template <class L>
void nn_with(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, const uint8_t* packed,
             const GemvCpu& cpu, GroupedShape groups, int64_t Kd, int64_t N) {
  const Call c{out, out_bf16, lhs, rhs, Kd, N, packed, cpu};
  const int64_t part_cols = N / rhs.parts();
  int64_t live_experts = 0;
  for (int64_t e = 0; e < groups.experts; ++e) live_experts += gemm_detail::group_rows(groups, e).live > 0;
  if (live_experts == 0 || part_cols == 0) return;
  const int threads = omp_get_max_threads();
  std::vector<Item> items;
  int64_t max_chunk = 0;
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    if (g.live == 0) continue;
    MOE_CHECK(g.live <= kMaxRows, "a gemv group above its rows");
    const int64_t chunk =
        chunk_cols<L>(c, g.live, walks_whole<L>(c, g.live), live_experts * rhs.parts(), threads);
    max_chunk = std::max(max_chunk, chunk);
    for (int part = 0; part < rhs.parts(); ++part)
      for (int64_t col = 0; col < part_cols; col += chunk)
        items.push_back({e, g.row0, g.live, part, col, std::min(chunk, part_cols - col)});
  }
  gemm_detail::WorkShares shares(int64_t(items.size()), threads);
#pragma omp parallel num_threads(threads)
  run_items<L>(c, items, shares, omp_get_thread_num(), max_chunk);
}

// A run of weight (nt) or gradient (tn) rows [k0, k1) of expert e: the backward forms' items.
struct RowRun {
  int64_t e, k0, k1;
};

// Every expert of `groups` with a live row, its rows [0, Kd) in runs of `rows`.
inline std::vector<RowRun> row_runs(GroupedShape groups, int64_t Kd, int64_t rows) {
  std::vector<RowRun> runs;
  for (int64_t e = 0; e < groups.experts; ++e)
    if (gemm_detail::group_rows(groups, e).live > 0)
      for (int64_t k0 = 0; k0 < Kd; k0 += rows) runs.push_back({e, k0, std::min(Kd, k0 + rows)});
  return runs;
}

}  // namespace MOE_GEMV_NS

// The instance's nn (cpu/gemm/gemm_gemv.h) on layer L, in the enclosing namespace.
#define MOE_DEFINE_GEMV_NN(L)                                                                    \
  void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, const uint8_t* packed, \
          const GemvCpu& cpu, GroupedShape groups, int64_t Kd, int64_t N) {                      \
    nn_with<L>(out, out_bf16, lhs, rhs, packed, cpu, groups, Kd, N);                             \
  }
