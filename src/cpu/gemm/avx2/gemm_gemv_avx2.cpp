// The gemv variant's ymm instance (cpu/gemm/gemm_gemv.cpp, cpu/gemm/gemm_gemv_kernel.h), for CPUs without
// AVX-512 BF16: each weight row's 16 bf16 widened to float32 as even and odd columns (vpslld, vpand: see
// load_row) and multiplied by each live row's value (vfmadd231ps), 6 rows x 16 columns a register block (12
// accumulators, 2 weight vectors, 1 broadcast of 16 registers); sums in float32, the output rounded once to
// nearest even (bf16) or stored as is.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/gemm/gemm_gemv.h"
#include "cpu/gemm/gemm_variants.h"

// Everything from here to pop_options is AVX2 code, whatever the build's -march; the headers above are the
// build ISA's (docs/design.md, "ISA levels").
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")

#define MOE_TARGET_AVX2 1
#include "cpu/ops/vec_math.h"
#define MOE_GEMV_NS moe::cpu::isa_avx2::gemv
#include "cpu/gemm/gemm_gemv_kernel.h"
#include "cpu/gemm/gemm_gemv_nt_kernel.h"
#include "cpu/gemm/gemm_gemv_tn_kernel.h"

namespace moe::cpu::isa_avx2::gemv {
namespace {

using Job = BlockJob<float>;
constexpr int64_t kTileCols = kTileColsOfInstance;  // the ymm layer's: two vectors of float32 sums a row

// The accumulators' type: unlike __m256 (declared may_alias), GCC keeps an array of it in registers.
using SumVector = float __attribute__((vector_size(32)));

// Weight row k's 16 columns as float32, exactly: each bf16 pair's 32-bit word shifted left 16 (its low,
// even column) and masked to its high half (the odd one), two operations where widening each half
// (vpmovzxwd, vpslld) took four. Sums are kept so, even columns in a row's first vector; store_output puts
// them back in order. A ragged tile reads its columns through a zeroed copy.
template <bool kFull>
[[gnu::always_inline]] inline void load_row(const char* p, int64_t cols, __m256& even, __m256& odd) {
  __m256i w;
  if constexpr (kFull) {
    w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  } else {
    alignas(32) bf16_t row[kTileCols] = {};
    std::memcpy(row, p, size_t(cols) * 2);
    w = _mm256_load_si256(reinterpret_cast<const __m256i*>(row));
  }
  even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0xffff0000u))));
}

template <int R>
[[gnu::always_inline]] inline void store_output(const SumVector (&acc)[R][2], const Job& j, const Tile& t) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // even (e0 e2 .. e14) and odd (o1 .. o15) to columns 0-15: unpacking pairs lane by lane gives columns
    // 0-3 | 8-11 and 4-7 | 12-15.
    const __m256 lo = _mm256_unpacklo_ps(__m256(acc[r][0]), __m256(acc[r][1]));
    const __m256 hi = _mm256_unpackhi_ps(__m256(acc[r][0]), __m256(acc[r][1]));
    alignas(32) float row[kTileCols];
    _mm256_store_ps(row, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_store_ps(row + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    if (j.out_bf16)
      f32_to_bf16_row(reinterpret_cast<bf16_t*>(t.out) + r * j.out_ld, row, t.cols);
    else
      std::memcpy(reinterpret_cast<float*>(t.out) + r * j.out_ld, row, size_t(t.cols) * 4);
  }
}

// A tile's sums at its block's end: the output (the reduction's last block) or the partial sums kept.
template <int R>
[[gnu::always_inline]] inline void end_sums(const SumVector (&acc)[R][2], const Job& j, const Tile& t) {
  if (j.last) return store_output<R>(acc, j, t);
  keep_sums(acc, t.sums, kTileCols);
}

// Weight rows a step of Ymm::walk_run where a whole tile's weight rows are one run of memory (packed: 32
// bytes a row, two a line) and its prefetch none (kRowsNoPrefetch) or along a run of lines: a line every
// `every` steps `ld` bytes on, 64 * every / ld rows a line (kPackedAheadBytes on: 2; the thread's next chunk
// shared by n register blocks: 2n); 0 where the tile is walked otherwise.
constexpr int64_t kRowsNoPrefetch = 2;
inline int64_t run_rows_a_line(const Job& j, const Tile& t) {
  if (t.cols != kTileCols || j.ld_bytes != kTileCols * 2) return 0;
  const PrefetchCursor& p = t.prefetch;
  if (p.row == nullptr) return kRowsNoPrefetch;
  if (p.segs != 1 || (64 * p.every) % p.ld != 0) return 0;
  return 64 * p.every / p.ld;
}

// Whether a block in place prefetches the block it reads ahead (Ymm::blocks_ahead) in address order, each
// tile (or group of G tiles walked side by side) its share of that block's run of memory (share_below; the
// item's tiles are whole weight rows, so the block is one run), not its own lines row by row: from 2 rows, or
// at 1 row on rows of at most 2 KiB. The real Zen 3 (moe_bench_few_rows 3 R gemv 64, x a sequential read,
// alternately): 2 rows 0.70 -> 0.91 on Qwen3's up in two parts [w1 | w3] (forward_backward's: rows of 1.5
// KiB) and 0.81-0.87 -> 0.89-0.95 on rows of 3-4 KiB; 1 row 0.64-0.67 -> 0.82-0.83 on Qwen3's parts,
// 0.72-0.79 -> 0.73-0.83 on 2 KiB rows, but 0.86-0.90 -> 0.80-0.82 on rows of 3-4 KiB; 3-6 rows (one tile at
// a time), ms: rows of 4 KiB 15-18 % faster (3 rows 10.5-10.8 -> 8.5-8.8 on Qwen3's down, 27.8-28.4
// -> 23.0-23.1 on OLMoE's up; 6 rows 12.2-12.3 -> 10.5), Qwen3's up (3 KiB) level.
inline bool prefetches_in_order(const Job& j, int R, int64_t G) {
  constexpr int64_t kShortRowBytes = 2048;
  return j.tiles * kTileCols * 2 == j.ld_bytes && j.tiles % G == 0 &&
         (R >= 2 || j.ld_bytes <= kShortRowBytes);
}
// Where the tile (or group) at weight w's share of the block ahead starts (prefetches_in_order): the
// block's run split in the order of the tiles, steps x 32 bytes a tile.
inline const char* share_below(const Job& j, const char* w) {
  return j.prefetch.base + (w - j.w) * j.steps;
}

// The ymm layer (cpu/gemm/gemm_gemv_kernel.h): lhs values staged as float32, one a step.
struct Ymm {
  static constexpr int kBlockRows = 6;
  // A chunk's last block: 2 rows walk 2 tiles side by side (8 FMA chains) and 4-6 rows have 8-12 chains,
  // but 3 rows have 6 (the FMA latency, not the pipes, sets their pace) and 1 row in a chunk of under 4
  // tiles 2; so a last row joins the block before's last (6 + 1 as 5 + 2) and 6 + 3 go as 5 + 4. The real Zen
  // 3 (kept weights, moe_bench_few_rows 1 R gemv 64, TF/s of the four shapes, alternately; FMA peak
  // ~0.19): 7 rows 0.151-0.157 (4 + 3) -> 0.160-0.172 (5 + 2; 6 + 1: 0.134-0.158), 8 rows 0.163-0.170 (4 +
  // 4) -> 0.173-0.178 (6 + 2), 9 rows 0.156-0.169 (6 + 3) -> 0.165-0.176 (5 + 4), 13 rows 0.167-0.170 (6 +
  // 4 + 3) -> 0.173-0.178, 14 rows 0.173-0.176 (6 + 4 + 4) -> 0.175-0.184 (6 + 6 + 2), 19 rows 0.170-0.177 ->
  // 0.178-0.185; 15 rows as 6 + 6 + 3 0.170-0.180, as 6 + 5 + 4 0.169-0.180.
  static constexpr int64_t chunk_last_rows(int64_t last, int64_t blocks) {
    return last == 1 ? 2 : last == 3 && blocks == 2 ? 4 : last;
  }
  // Blocks only: chunks on this layer are not measured yet (the one try, held to AVX2 on the Zen 4, ran with
  // a chunk's prefetch mis-sized for 32-byte tiles: 0.08-0.11 TF/s at 8 rows against 0.08-0.14 in blocks).
  static constexpr int64_t kChunkRows = kMaxRows + 1;
  // In place, 4 rows and more walk 32 weight rows a block (the zmm layer's 8 at 1-4 rows and 16 at 5-8), the
  // lines of the block below prefetched (two below at 8): a tile's sums (one tile of 32-byte rows a walk)
  // then go to scratch a quarter as often. The real Zen 3 (64 experts, in place, x a sequential read, medians
  // of 4 rounds alternately, moe_bench_few_rows 2 R gemv 64; "parts": [w1 | w3], forward_backward's up):
  // 4 rows 0.55-0.71 -> 0.70-0.80, in parts 0.59-0.71 -> 0.79-0.86; 6 rows 0.48-0.68 -> 0.67-0.77, in parts
  // 0.49-0.67 -> 0.60-0.80; 8 rows 0.074-0.084 -> 0.103-0.111 TF/s on Qwen3's shapes (OLMoE's 0.9-1.3x);
  // 5 rows 0.97-1.2x; 12 and 32 rows (already 32 deep; one block ahead instead of two) 0.94-1.3x. 1-3 rows
  // stay at 8: 32 read 0.55-0.59 against 0.81-0.85 at 1 row, 0.73-0.81 against 0.88-0.91 at 2.
  static constexpr int64_t block_depth(int64_t live) { return live <= 3 ? 8 : kMaxDepth; }
  static constexpr int64_t blocks_ahead(int64_t depth) { return depth >= kMaxDepth ? 1 : 2; }
  static constexpr int64_t kTileCols = gemv::kTileCols, kStep = 1;
  using Staged = float;
  static void stage(const bf16_t* lhs, int64_t Kd, int64_t live, int64_t k0, int64_t depth, float* x) {
    for (int64_t r = 0; r < live; ++r)
      for (int64_t k = 0; k < depth; ++k) x[k * live + r] = widen(lhs[r * Kd + k0 + k]);
  }
  template <int R>
  static void tile(const Job& j, const Tile& t) {
    if (const int64_t rows_a_line = run_rows_a_line(j, t))
      return R <= 5 && rows_a_line % 2 == 0 ? walk_run<R, 2>(j, t, rows_a_line)
                                            : walk_run<R, 1>(j, t, rows_a_line);
    if (R >= 3 && t.prefetch.follows_rows(j.ld_bytes) && prefetches_in_order(j, R, 1))
      return walk<R, true>(j, t, RowPrefetch{share_below(j, t.w), kTileCols * 2});
    walk_with_prefetch<Ymm, R>(j, t);
  }
  // Whole tiles walked side by side, 4 at 1 row, 2 at 2 and (in place) 3: packed (walk_runs says why) or in
  // place (walk_rows).
  template <int R>
  static constexpr int64_t kTilesAtOnce = R <= 2   ? 4 / R
                                          : R == 3 ? 2
                                                   : 1;
  template <int R>
  static bool tile_group(const Job& j, const std::array<Tile, kTilesAtOnce<R>>& g) {
    if (j.ld_bytes != kTileCols * 2) {
      if (R == 3 && j.live != 3) return false;  // a 3-row block beside others: walk_rows says why
      for (const Tile& t : g)
        if (t.cols != kTileCols || (t.prefetch.row && !t.prefetch.follows_rows(j.ld_bytes))) return false;
      walk_rows<R>(j, g);
      return true;
    }
    if (R == 3) return false;  // packed, 2 tiles at 3 rows read 0.69-0.77 of the read against one's 0.88-0.95
    const int64_t rows_a_line = run_rows_a_line(j, g[0]);
    for (const Tile& t : g)
      if (rows_a_line == 0 || run_rows_a_line(j, t) != rows_a_line) return false;
    walk_runs<R>(j, g, rows_a_line);
    return true;
  }
  template <int R>
  static void walk_rows(const Job& j, const std::array<Tile, kTilesAtOnce<R>>& g);
  template <int R, bool kFull, class Prefetch>
  static void walk(const Job& j, const Tile& t, Prefetch prefetch);
  template <int R, int kRows>
  static void walk_run(const Job& j, const Tile& t, int64_t rows_a_line);
  template <int R>
  static void walk_runs(const Job& j, const std::array<Tile, kTilesAtOnce<R>>& g, int64_t rows_a_line);
};

// sums[r] += x[r] * a weight row's (even, odd) columns, for R live rows.
template <int R>
[[gnu::always_inline]] inline void multiply_row(SumVector (&sums)[R][2], __m256 even, __m256 odd,
                                                const float* x) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256 a = _mm256_broadcast_ss(x + r);
    sums[r][0] = SumVector(_mm256_fmadd_ps(even, a, __m256(sums[r][0])));
    sums[r][1] = SumVector(_mm256_fmadd_ps(odd, a, __m256(sums[r][1])));
  }
}

// One tile of a block for R live rows: sums += lhs values . weight rows.
template <int R, bool kFull, class Prefetch>
void Ymm::walk(const Job& j, const Tile& t, Prefetch prefetch) {
  SumVector acc[R][2];
  start_sums(acc, j.first, t.sums, kTileCols);
  const char* w = t.w;
  const float* x = j.x;
  const int64_t steps = j.steps, ld = j.ld_bytes, x_stride = j.x_stride;
  for (int64_t k = 0; k < steps; ++k, w += ld, x += x_stride) {
    __m256 even, odd;
    load_row<kFull>(w, t.cols, even, odd);
    prefetch.step();
    multiply_row<R>(acc, even, odd, x);
  }
  end_sums<R>(acc, j, t);
}

// A tile whose weights are one run of memory, a line prefetched along the run every rows_a_line rows, kRows
// rows an inner step: where the memory streams fast the cursor's bookkeeping a row (about half of a few-row
// step's instructions) set the speed. Three register blocks and more (13 rows and up) walked with the cursor
// and a next chunk's prefetch sized for 64-byte rows (the zmm layer's), which fetched it twice over; right
// sized and walked so, the real Zen 3 (kept weights, alternately, moe_bench_few_rows 3 R gemv, memory at
// 18-26 GB/s, FMA peak 0.176 TF/s): 8 rows 0.071-0.099 -> 0.104-0.114 TF/s, 16 rows 0.22-0.33 -> 0.35-0.38 of
// the read, 32 rows 0.092-0.134 -> 0.123-0.140 TF/s, 6 and 12 rows level. Up to 5 rows two rows (a line) a
// step; a full register block (6 rows) one, since two rows' vectors beside its twelve sums spilled (0.09
// against 0.13-0.18 TF/s), as did three of its sums in walk with the cursor's bookkeeping. The Zen 4 held to
// AVX2, kept weights, x the read, alternately (moe_bench_few_rows 3 R gemv): memory at 50-58 GB/s, 1 row
// 0.72-0.88 -> 0.94, 2 rows 0.47-0.61 -> 0.87-0.95, 3 rows 0.55-0.67 -> 0.71-0.82, 4 rows 0.49-0.68 ->
// 0.65-0.80, 5 rows 0.40-0.55 -> 0.56-0.84; at ~33 GB/s level from 3 rows, 1-2 rows ~5 % lower (0.89-0.96
// against 0.95-1.06); 8 and 10 rows (two register blocks, 4 + 4 and 6 + 4, sharing the next chunk's prefetch)
// 0.113-0.173 TF/s against 0.085-0.149; 12 rows (6 + 6; FMA peak 0.22 TF/s) median 0.17 -> 0.20 TF/s
// (0.108-0.213 -> 0.157-0.214), 6 rows level (0.14-0.21).
template <int R, int kRows>
void Ymm::walk_run(const Job& j, const Tile& t, int64_t rows_a_line) {
  constexpr int64_t kRow = kTileCols * 2;
  SumVector acc[R][2];
  start_sums(acc, j.first, t.sums, kTileCols);
  const char* w = t.w;
  const char* ahead = t.prefetch.row;  // nullptr: none
  const float* x = j.x;
  const int64_t steps = j.steps, x_stride = j.x_stride;
  __m256 even, odd;
  int64_t k = 0;
  for (; k + rows_a_line <= steps; k += rows_a_line) {
    if (ahead) {
      __builtin_prefetch(ahead, 0, 2);  // into L2, as PrefetchCursor
      ahead += 64;
    }
    for (int64_t s = 0; s < rows_a_line; s += kRows, w += kRows * kRow, x += kRows * x_stride) {
#pragma GCC unroll 2
      for (int r = 0; r < kRows; ++r) {
        load_row<true>(w + r * kRow, kTileCols, even, odd);
        multiply_row<R>(acc, even, odd, x + r * x_stride);
      }
    }
  }
  for (; k < steps; ++k, w += kRow, x += x_stride) {
    load_row<true>(w, kTileCols, even, odd);
    multiply_row<R>(acc, even, odd, x);
  }
  end_sums<R>(acc, j, t);
}

// acc[i] += x's R values . weight row i of G tiles side by side (tile i's row at w + i * apart).
template <int R, int64_t G>
[[gnu::always_inline]] inline void multiply_tiles(SumVector (&acc)[G][R][2], const char* w, int64_t apart,
                                                  const float* x) {
  __m256 even, odd;
#pragma GCC unroll 8
  for (int64_t i = 0; i < G; ++i) {
    load_row<true>(w + i * apart, kTileCols, even, odd);
    multiply_row<R>(acc[i], even, odd, x);
  }
}

// kTilesAtOnce<R> tiles whose weights are runs of memory (walk_run's case), walked side by side, each tile's
// rows in order (the sums' order is walk_run's). At 1-2 rows a tile's 2R sums take an FMA each a weight row:
// one tile's chains alone, an FMA's latency a row, held a core near 32 bytes per 4 cycles, about what this
// CPU's memory streams. The real Zen 3 (kept weights, x a sequential read, alternately): 64 experts
// (moe_bench_few_rows 3 R gemv 64) 1 row 0.86-0.91 -> 0.92-0.99, 2 rows 0.85-0.92 -> 0.90-0.97; in the block,
// % of the bandwidth peak (moe-bench --model M --tokens T --with-peak): Qwen3-30B-A3B T 1 74-77 -> 81-84 (4
// tiles: 81-83), T 8 77-79 -> 84-87 (86-89), OLMoE T 1 76-81 -> 80-85 (81-89). 4 tiles at 2 rows (16 sums)
// ran level with 2; 2 tiles at 3 rows (12 sums and the rest) spilled: 0.56 against 0.77 of the read.
template <int R>
void Ymm::walk_runs(const Job& j, const std::array<Tile, kTilesAtOnce<R>>& g, int64_t rows_a_line) {
  constexpr int64_t kRow = kTileCols * 2, G = kTilesAtOnce<R>;
  SumVector acc[G][R][2];
  const char* ahead[G];
#pragma GCC unroll 8
  for (int64_t i = 0; i < G; ++i) {
    start_sums(acc[i], j.first, g[size_t(i)].sums, kTileCols);
    ahead[i] = g[size_t(i)].prefetch.row;
  }
  const char* w = g[0].w;
  const int64_t apart = g[1].w - g[0].w;
  const float* x = j.x;
  const int64_t steps = j.steps, x_stride = j.x_stride;
  int64_t k = 0;
  for (; k + rows_a_line <= steps; k += rows_a_line) {
    if (ahead[0]) {
#pragma GCC unroll 8
      for (int64_t i = 0; i < G; ++i) {
        __builtin_prefetch(ahead[i], 0, 2);  // into L2, as PrefetchCursor
        ahead[i] += 64;
      }
    }
    for (int64_t s = 0; s < rows_a_line; ++s, w += kRow, x += x_stride) multiply_tiles<R>(acc, w, apart, x);
  }
  for (; k < steps; ++k, w += kRow, x += x_stride) multiply_tiles<R>(acc, w, apart, x);
#pragma GCC unroll 8
  for (int64_t i = 0; i < G; ++i) end_sums<R>(acc[i], j, g[size_t(i)]);
}

// kTilesAtOnce<R> adjacent whole tiles of a block of weight rows in place (a row's 128 or 64 bytes a step),
// the block ahead (two below) prefetched as each tile's own walk does (or in address order:
// prefetches_in_order), a line once. A tile alone took 2R FMA chains through 32 bytes a row (walk_runs) and,
// where rows lie 4 KiB apart, every row's lines in one L1 set. The real Zen 3 (64 experts, x a sequential
// read, moe_bench_few_rows 3 R gemv 64, "gemv", alternately): rows 4 KiB apart (Qwen3's down, OLMoE's up and
// down) 1 row 0.65-0.75 -> 0.87-0.91, 2 rows 0.60-0.66 -> 0.80-0.89; Qwen3's up (3 KiB rows) 1 row 0.92-0.94
// -> 0.88-0.90 (2 tiles: 0.92-0.95, but 0.86-0.89 on the others), 2 rows 0.83-0.88 -> 0.92-0.94. Blocks of 4
// weight rows where rows lie 4 KiB apart (one tile: 0.74-0.79 at 1 row) ran level or worse beside it. At 3
// rows, 2 tiles (12 sums, 2 weight vectors, a broadcast and the mask: all 16 registers), where the group has
// those 3 rows alone (moe_bench_few_rows 3 3 gemv 64, the Zen 3, alternately): 0.070-0.076 -> 0.079-0.085
// TF/s, in two parts 0.066-0.073 -> 0.074-0.083. A 3-row block beside a 6-row one (9 rows, bound by the FMA
// pipes) walks a tile at a time: 2 tiles there, in a try whose odd columns were widened by two shifts (no
// mask) and x broadcast again a tile, ran 0.111-0.117 TF/s against 0.125-0.132 on Qwen3's up (this walk
// itself not measured there: the machine too noisy since).
template <int R>
void Ymm::walk_rows(const Job& j, const std::array<Tile, kTilesAtOnce<R>>& g) {
  constexpr int64_t G = kTilesAtOnce<R>, kBytes = G * kTileCols * 2;
  SumVector acc[G][R][2];
#pragma GCC unroll 8
  for (int64_t i = 0; i < G; ++i) start_sums(acc[i], j.first, g[size_t(i)].sums, kTileCols);
  const char* w = g[0].w;
  const char* ahead = g[0].prefetch.row;  // nullptr: none
  const float* x = j.x;
  const int64_t steps = j.steps, x_stride = j.x_stride, ld = j.ld_bytes;
  int64_t ahead_step = ld;  // a row's tiles of the block below, or (in address order) the next kBytes
  if (ahead && prefetches_in_order(j, R, G)) {
    ahead = share_below(j, g[0].w);
    ahead_step = kBytes;
  }
  for (int64_t k = 0; k < steps; ++k, w += ld, x += x_stride) {
    multiply_tiles<R>(acc, w, kTileCols * 2, x);
    if (ahead) {
      for (int64_t o = 0; o < kBytes; o += 64) __builtin_prefetch(ahead + o, 0, 2);
      __builtin_prefetch(ahead + kBytes - 1, 0, 2);
      ahead += ahead_step;
    }
  }
#pragma GCC unroll 8
  for (int64_t i = 0; i < G; ++i) end_sums<R>(acc[i], j, g[size_t(i)]);
}

// nt's ymm layer (cpu/gemm/gemm_gemv_nt_kernel.h): two weight rows x 4 dout rows a step of 16 columns, each
// widened to float32 as even and odd columns (load_row) and multiplied by the dout row's alike (16
// accumulators: even and odd sums of 8 (row, weight row) pairs; 4 weight vectors, 2 dout vectors).
struct YmmNt {
  static constexpr int kNtBlockRows = 4;
  template <int R>
  static void dot_rows(const NtJob& j);
};

inline float sum_lanes(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

// acc[r] += the products of weight row w0's (and, kPair, w1's) 16 columns from w0 (w1) with dout row r's from
// x (rows ld_x bytes apart), as even and odd columns (a ragged tile: its first `cols`).
template <int R, bool kFull, bool kPair>
[[gnu::always_inline]] inline void nt_step(SumVector (&acc)[R][2], const char* w0, const char* w1,
                                           const char* x, int64_t ld_x, int64_t cols) {
  __m256 a_even, a_odd, b_even, b_odd;
  load_row<kFull>(w0, cols, a_even, a_odd);
  if constexpr (kPair) load_row<kFull>(w1, cols, b_even, b_odd);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m256 x_even, x_odd;
    load_row<kFull>(x + r * ld_x, cols, x_even, x_odd);
    acc[r][0] = SumVector(_mm256_fmadd_ps(a_even, x_even, _mm256_fmadd_ps(a_odd, x_odd, __m256(acc[r][0]))));
    if constexpr (kPair)
      acc[r][1] =
          SumVector(_mm256_fmadd_ps(b_even, x_even, _mm256_fmadd_ps(b_odd, x_odd, __m256(acc[r][1]))));
  }
}

// Weight rows k and (kPair) k + 1 with the block's R dout rows, over every part's columns. The pair and
// the ragged tile decided once, not a step: tested in the step they left branches and spilled sums there
// (~60 instructions a step of 16 FMAs, now ~45). The real Zen 3, alternately (moe_bench_few_rows 2 R gemv
// 64 nt): 8 rows 0.051-0.066 -> 0.081-0.101 TF/s, 16 rows 0.056-0.070 -> 0.096-0.110, 1 and 4 rows level.
template <int R, bool kPair>
void dot_pair(const NtJob& j, int64_t k, int64_t ahead) {
  SumVector acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = SumVector{};
  for (int p = 0; p < j.parts; ++p) {
    const char* w0 = reinterpret_cast<const char*>(j.w[p] + k * j.part_cols);
    const char* w1 = w0 + j.part_cols * 2;
    const char* d = reinterpret_cast<const char*>(j.dout + p * j.part_cols);
    int64_t n = 0;
    for (; n + kTileCols <= j.part_cols; n += kTileCols) {
      __builtin_prefetch(w0 + ahead + 2 * n, 0, 2);  // into L2 (nt_ahead), a line every other step
      if constexpr (kPair) __builtin_prefetch(w1 + ahead + 2 * n, 0, 2);
      nt_step<R, true, kPair>(acc, w0 + 2 * n, w1 + 2 * n, d + 2 * n, 2 * j.N, kTileCols);
    }
    if (n < j.part_cols)
      nt_step<R, false, kPair>(acc, w0 + 2 * n, w1 + 2 * n, d + 2 * n, 2 * j.N, j.part_cols - n);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    store_dot(j, r, k, sum_lanes(__m256(acc[r][0])));
    if constexpr (kPair) store_dot(j, r, k + 1, sum_lanes(__m256(acc[r][1])));
  }
}

template <int R>
void YmmNt::dot_rows(const NtJob& j) {
  const int64_t ahead = 2 * nt_ahead(j);  // bytes
  int64_t k = 0;
  for (; k + 2 <= j.rows; k += 2) dot_pair<R, true>(j, k, ahead);
  if (k < j.rows) dot_pair<R, false>(j, k, ahead);
}

// tn's ymm layer (cpu/gemm/gemm_gemv_tn_kernel.h): the group's lhs and dout staged as float32, a gradient
// row x 64 columns a tile (8 accumulators, the dout rows read by the multiplies, 1 broadcast), rounded once
// (bf16) and streamed straight from the registers. One row a tile: rows of 4 KiB (N 2048, bf16) streamed two
// at a time wrote at half the speed of one (9 against 15-18 GB/s on the real Zen 3); 8 sums, not 4: a
// tile's sums are chains as long as the group has rows, and 4 of them left the multiplies waiting; 32
// columns a tile in three partial sums (12 chains) ran slower (8 rows 0.057-0.070 against 0.087-0.098 TF/s,
// 1 row 0.017 against 0.022). An item's gradient rows are walked a block of columns at a time (run).
struct YmmTn {
  using Staged = float;
  static constexpr int64_t kTnCols = 64;
  static constexpr int kVectors = kTnCols / 8;
  // Staged dout rows' distance: a line more than a row, so that they do not all fall in one L1 set (rows of
  // 2048 float32 are 8 KiB apart, and a tile's 8-16 rows' lines then thrashed an 8-way set).
  static int64_t dout_ld(int64_t N) { return N + 16; }
  static int64_t staged_size(int64_t live, int64_t Kd, int64_t N) { return live * (Kd + dout_ld(N)); }
  // lhs (Kd, live) then dout (live, dout_ld(N)).
  static void stage(const bf16_t* lhs, const bf16_t* dout, int64_t ld_dout, int64_t live, int64_t Kd,
                    int64_t N, float* staged) {
    for (int64_t r = 0; r < live; ++r) {
      for (int64_t k = 0; k < Kd; ++k) staged[k * live + r] = widen(lhs[r * Kd + k]);
      for (int64_t n = 0; n < N; ++n) staged[Kd * live + r * dout_ld(N) + n] = widen(dout[r * ld_dout + n]);
    }
  }
  static void row(const TnJob<float>& j, int64_t k, int64_t n0, int64_t n1);
  // The item's gradient rows over a block of columns at a time: the block's dout rows then stay in L1 while
  // every gradient row of the item reads them (whole rows of dout, 64 KiB at 8 rows x 2048 columns, came
  // from L2 for each gradient row: 32 bytes a FMA, more than L2 serves). With dout_ld's padding, the real
  // Zen 3 (moe_bench_few_rows 3 R gemv 64 tn, alternately): 8 rows 0.080-0.091 -> 0.087-0.097 TF/s, 16 rows
  // 0.043-0.079 -> 0.061-0.097, 4 rows level; the blocks alone or the padding alone: level.
  static void run(const TnJob<float>& j) {
    const int64_t cols = block_cols(j.live, j.N);
    for (int64_t n0 = 0; n0 < j.N; n0 += cols)
      for (int64_t k = j.k0; k < j.k1; ++k) row(j, k, n0, std::min(j.N, n0 + cols));
  }
  // Columns a block: its dout rows at most kL1Bytes, whole tiles.
  static constexpr int64_t kL1Bytes = int64_t(16) << 10;
  static int64_t block_cols(int64_t live, int64_t N) {
    const int64_t tiles = std::max<int64_t>(1, kL1Bytes / (live * kTnCols * 4));
    return std::min(N, tiles * kTnCols);
  }
};

using TnSums = SumVector[YmmTn::kVectors];

template <bool kNotNan>
[[gnu::always_inline]] inline void stream_bf16(char* o, const __m256 (&sums)[YmmTn::kVectors]) {
#pragma GCC unroll 4
  for (int v = 0; v < YmmTn::kVectors / 2; ++v)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(o) + v, bf16_of_16<kNotNan>(sums[2 * v], sums[2 * v + 1]));
}

// A gradient row's tile (the first `cols` of its 64 columns) from its sums, rounded once (bf16): whole and
// aligned, streamed straight from the registers; else through a row in memory. The rounding checks the
// tile for NaN once, not each vector (bf16_words' blend): at 4 rows an expert the rounding's instructions
// set tn's pace, 18 GB/s of gradient written against 22 without the blend (moe_bench_few_rows 3 4 gemv 64
// tn, the Zen 3).
inline void store_grad(char* o, bool bf16, const TnSums& acc, int64_t cols) {
  if (cols == YmmTn::kTnCols && reinterpret_cast<uintptr_t>(o) % 32 == 0) {
    if (bf16) {
      __m256 sums[YmmTn::kVectors];
#pragma GCC unroll 8
      for (int v = 0; v < YmmTn::kVectors; ++v) sums[v] = __m256(acc[v]);
      if (any_nan<YmmTn::kVectors / 2>(sums))
        stream_bf16<false>(o, sums);
      else
        stream_bf16<true>(o, sums);
    } else {
#pragma GCC unroll 8
      for (int v = 0; v < YmmTn::kVectors; ++v)
        _mm256_stream_ps(reinterpret_cast<float*>(o) + 8 * v, __m256(acc[v]));
    }
    return;
  }
  alignas(32) float row[YmmTn::kTnCols];
#pragma GCC unroll 8
  for (int v = 0; v < YmmTn::kVectors; ++v) _mm256_store_ps(row + 8 * v, __m256(acc[v]));
  if (bf16) return f32_to_bf16_row(reinterpret_cast<bf16_t*>(o), row, cols);
  std::memcpy(o, row, size_t(cols) * 4);
}

// acc += x[r] * dout row r's 64 columns from n (a ragged tile's `cols` of them read through a zeroed copy),
// over the group's live rows (x: the gradient row's lhs values, `live` of them).
template <bool kFull>
[[gnu::always_inline]] inline void sum_rows(TnSums& acc, const TnJob<float>& j, const float* x,
                                            const float* d, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < j.live; ++r) {
    const float* dr = d + r * YmmTn::dout_ld(j.N) + n;
    alignas(32) float tail[YmmTn::kTnCols];
    if constexpr (!kFull) {
      std::memset(tail, 0, sizeof tail);
      dr = static_cast<const float*>(std::memcpy(tail, dr, size_t(cols) * 4));
    }
    const __m256 a = _mm256_broadcast_ss(x + r);
#pragma GCC unroll 8
    for (int v = 0; v < YmmTn::kVectors; ++v)
      acc[v] = SumVector(_mm256_fmadd_ps(_mm256_loadu_ps(dr + 8 * v), a, __m256(acc[v])));
  }
}

// Gradient row k over columns [n0, n1), tile by tile. The 2-row x 32-column tiles before, each rounded a
// value at a time (scalar) and through memory before its stream, wrote 9 GB/s at 1 row and 4.2-6.6 at 8
// (moe_bench_few_rows 3 R gemv 64 tn, the real Zen 3; it streams 34-40 GB/s), these 21-24 at 1 row, 16-17 at
// 4 and 8-9 at 8.
void YmmTn::row(const TnJob<float>& j, int64_t k, int64_t n0, int64_t n1) {
  const float* x = j.staged + k * j.live;
  const float* d = j.staged + j.Kd * j.live;
  char* out = j.out + (k - j.k0) * j.N * (j.out_bf16 ? 2 : 4);
  for (int64_t n = n0; n < n1; n += kTnCols) {
    const int64_t cols = std::min(kTnCols, n1 - n);
    TnSums acc;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) acc[v] = SumVector{};
    if (cols == kTnCols)
      sum_rows<true>(acc, j, x, d, n, cols);
    else
      sum_rows<false>(acc, j, x, d, n, cols);
    store_grad(out + n * (j.out_bf16 ? 2 : 4), j.out_bf16, acc, cols);
  }
}

}  // namespace

MOE_DEFINE_GEMV_NN(Ymm)
MOE_DEFINE_GEMV_NT(YmmNt)
MOE_DEFINE_GEMV_TN(YmmTn)

}  // namespace moe::cpu::isa_avx2::gemv

#pragma GCC pop_options
