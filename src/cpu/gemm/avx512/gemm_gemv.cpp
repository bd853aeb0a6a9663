// The `gemv` variant: cpu/gemm/gemm.h's nn and nn_swiglu for groups of 1-32 rows (decode steps, small
// micro-batches, EP ranks with few rows per expert), where the block is bound by reading expert weights, not
// by multiplying them. It reads each weight byte once, where it lies: no packing pass (dpbf16 packs each
// panel into its tile layout and reads it back, and at a few rows that traffic, not the arithmetic, sets the
// speed: 0.4-0.6 of a sequential read of the same weights, against 0.9 here at 1-4 rows).
//
// Work: items of (expert, weight part, its whole rows or a column chunk of them where the items are too few
// for two a thread), in contiguous runs a thread, so a thread streams an expert's weights in address order.
// An item walks its reduction in blocks of a few weight rows (block_depth: fewer the fewer the rows); within
// a block, 32 columns at a time, each pair of weight rows (k, k + 1) is interleaved in registers
// (vpunpck{l,h}wd, "lane order") and multiplied by each live row's bf16 pair (vdpbf16ps), 12 rows a register
// block. Sums wait in a per-thread float32 scratch between blocks; each line a block reads prefetches the
// line two blocks below it into L2, so the DRAM stream runs ahead of the arithmetic.
//
// Arithmetic: bf16 products summed in float32 in the same order whatever the thread count, the output
// rounded once to nearest even (bf16) or stored as is (float32); an odd reduction's last weight row pairs
// with zeros. nn_swiglu is nn into h, then one swiglu_forward over the stored h of every row (as the
// nn_then_swiglu composition computes it).
#include "cpu/gemm/gemm_variants.h"

#ifdef MOE_HAVE_DPBF16

// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as the unused merge operand,
// which -Wmaybe-uninitialized (and, for some, -Wuninitialized) reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cpu/ops/swiglu.h"
#include "moe/cpu_isa.h"

// Everything from here to pop_options is AVX-512 BF16 code, whatever the build's -march (docs/design.md,
// "ISA levels"); the headers above are the build ISA's.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,bmi,bmi2")

namespace moe::cpu::isa_avx512_bf16::gemv {

constexpr int64_t kMaxRows = 32;  // the largest group this kernel takes (supports())
constexpr int kBlockRows = 12;  // live rows per register block: 24 accumulators, 2 weight pairs, 1 broadcast
constexpr int64_t kTileCols = 32;  // columns of a register block (two vectors of pair sums a row)
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

namespace {

// A block's view of its operands, for one register block of rows and every column tile of an item.
struct BlockJob {
  const char* w;         // weight row k0 at the item's first column
  int64_t ld_bytes;      // weight rows' distance
  int64_t pairs;         // whole pairs of weight rows
  bool odd;              // one more weight row, paired with zeros
  int64_t prefetch_off;  // bytes from a line read to the line to prefetch (0: none)
  int64_t tiles;         // column tiles of 32, the last one's live columns last_cols
  __mmask32 last_cols;
  const int32_t* x;  // lhs pairs: pair p of row r at x[p * kMaxRows + r]
  float* sums;       // partial sums: tile t's row r's two vectors at sums + t * sums_tile + r * 32
  int64_t sums_tile;
  bool first, last;  // the reduction's first block (sums start at zero) / last (store the output)
  char* out;         // last: tile t's row r at out + (t * 32 + r * out_ld) elements
  int64_t out_ld;
  bool out_bf16;
};

// One tile of a block: its weights, live columns, partial sums and output.
struct Tile {
  const char* w;
  __mmask32 cols;
  float* sums;
  char* out;
};

// Lane order (unpack interleaves within 128-bit lanes) -> columns [16 half, 16 half + 16) in order.
inline __m512i columns_from_lanes(int half) {
  return half == 0 ? _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23)
                   : _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

inline __m512i load_row(const char* p, __mmask32 cols) {
  return cols == __mmask32(0xffffffffu) ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(cols, p);
}

// The accumulators' type: unlike __m512 (declared may_alias), GCC keeps an array of it in registers.
using SumVector = float __attribute__((vector_size(64)));

template <int R>
[[gnu::always_inline]] inline void multiply_pair(SumVector (&acc)[R][2], __m512i r0, __m512i r1,
                                                 const int32_t* x) {
  const __m512bh b0 = __m512bh(_mm512_unpacklo_epi16(r0, r1)), b1 = __m512bh(_mm512_unpackhi_epi16(r0, r1));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512bh a = __m512bh(_mm512_set1_epi32(x[r]));
    acc[r][0] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][0]), b0, a));
    acc[r][1] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][1]), b1, a));
  }
}

template <int R>
[[gnu::always_inline]] inline void store_output(const SumVector (&acc)[R][2], const BlockJob& j,
                                                const Tile& t) {
  const __mmask16 lo = __mmask16(t.cols & 0xffffu), hi = __mmask16(t.cols >> 16);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 a0 = __m512(acc[r][0]), a1 = __m512(acc[r][1]);
    const __m512 c0 = _mm512_permutex2var_ps(a0, columns_from_lanes(0), a1);
    const __m512 c1 = _mm512_permutex2var_ps(a0, columns_from_lanes(1), a1);
    if (j.out_bf16) {
      bf16_t* o = reinterpret_cast<bf16_t*>(t.out) + r * j.out_ld;
      _mm512_mask_storeu_epi16(o, t.cols, __m512i(_mm512_cvtne2ps_pbh(c1, c0)));
    } else {
      float* o = reinterpret_cast<float*>(t.out) + r * j.out_ld;
      _mm512_mask_storeu_ps(o, lo, c0);
      _mm512_mask_storeu_ps(o + 16, hi, c1);
    }
  }
}

// One tile of a block for R live rows: sums += lhs pairs . weight pairs.
template <int R>
[[gnu::always_inline]] inline void multiply_tile(const BlockJob& j, const Tile& t) {
  SumVector acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v)
      acc[r][v] = j.first ? SumVector{} : SumVector(_mm512_load_ps(t.sums + r * kTileCols + 16 * v));
  const char* w = t.w;
  const int32_t* x = j.x;
  for (int64_t p = 0; p < j.pairs; ++p, w += 2 * j.ld_bytes, x += kMaxRows) {
    const __m512i r0 = load_row(w, t.cols), r1 = load_row(w + j.ld_bytes, t.cols);
    _mm_prefetch(w + j.prefetch_off, _MM_HINT_T1);
    _mm_prefetch(w + j.ld_bytes + j.prefetch_off, _MM_HINT_T1);
    multiply_pair<R>(acc, r0, r1, x);
  }
  if (j.odd) multiply_pair<R>(acc, load_row(w, t.cols), _mm512_setzero_si512(), x);
  if (j.last) return store_output<R>(acc, j, t);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) _mm512_store_ps(t.sums + r * kTileCols + 16 * v, __m512(acc[r][v]));
}

// A block over every column tile of an item.
template <int R>
void multiply_block(const BlockJob& j) {
  const int64_t elem = j.out_bf16 ? 2 : 4;
  for (int64_t t = 0; t < j.tiles; ++t)
    multiply_tile<R>(j, {j.w + t * kTileCols * 2, t + 1 < j.tiles ? __mmask32(0xffffffffu) : j.last_cols,
                         j.sums + t * j.sums_tile, j.out + t * kTileCols * elem});
}

template <int... R>
constexpr std::array<void (*)(const BlockJob&), sizeof...(R)> blocks_by_rows(
    std::integer_sequence<int, R...>) {
  return {&multiply_block<R + 1>...};
}
constexpr auto kBlocks = blocks_by_rows(std::make_integer_sequence<int, kBlockRows>());

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

// Weight rows [k0, k0 + depth) of row r's lhs pairs into x (pair p of row r at x[p * kMaxRows + r]); an
// odd last element pairs with a zero.
void stage_pairs(const bf16_t* lhs, int64_t Kd, int64_t live, int64_t k0, int64_t depth, int32_t* x) {
  for (int64_t r = 0; r < live; ++r) {
    const bf16_t* row = lhs + r * Kd + k0;
    for (int64_t p = 0; 2 * p < depth; ++p) {
      const uint32_t lo = row[2 * p], hi = 2 * p + 1 < depth ? row[2 * p + 1] : 0;
      x[p * kMaxRows + r] = int32_t(lo | hi << 16);
    }
  }
}

// Floats of a column tile's partial sums for `live` rows: 32 a row and a line more, so that tiles are not a
// power of two bytes apart (at 32 rows they were 4 KiB apart, as the rows of a weight 2048 columns wide:
// every tile's sums and every weight line a block reads in one L1 set).
inline int64_t tile_sums(int64_t live) {
  return live * kTileCols + 16;
}

// One item, block by block of its reduction.
void run_item(const Call& c, const Item& it, float* sums, int32_t* x) {
  const int64_t part_cols = c.N / c.rhs.parts(), ld_bytes = part_cols * 2;
  const char* w0 = static_cast<const char*>(c.rhs.part(it.part)) + (it.e * c.Kd * part_cols + it.col0) * 2;
  const int64_t out_col = it.part * part_cols + it.col0, elem = c.out_bf16 ? 2 : 4;
  const int64_t block = block_depth(it.live);
  for (int64_t k0 = 0; k0 < c.Kd; k0 += block) {
    const int64_t depth = std::min(block, c.Kd - k0);
    stage_pairs(c.lhs + it.row0 * c.Kd, c.Kd, it.live, k0, depth, x);
    // The lines kBlocksAhead blocks below, where that block is a whole one (a short last block is not worth
    // its own case).
    const int64_t prefetch = k0 + (kBlocksAhead + 1) * block <= c.Kd ? kBlocksAhead * block * ld_bytes : 0;
    const int64_t tiles = (it.cols + kTileCols - 1) / kTileCols, tail = it.cols - (tiles - 1) * kTileCols;
    for (int64_t r0 = 0; r0 < it.live; r0 += kBlockRows) {
      const int rows = int(std::min<int64_t>(kBlockRows, it.live - r0));
      const BlockJob j{w0 + k0 * ld_bytes,
                       ld_bytes,
                       depth / 2,
                       depth % 2 != 0,
                       r0 == 0 ? prefetch : 0,
                       tiles,
                       tail >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << tail) - 1),
                       x + r0,
                       sums + r0 * kTileCols,
                       tile_sums(it.live),
                       k0 == 0,
                       k0 + depth == c.Kd,
                       static_cast<char*>(c.out) + ((it.row0 + r0) * c.N + out_col) * elem,
                       c.N,
                       c.out_bf16};
      kBlocks[size_t(rows - 1)](j);
    }
  }
}

// A thread's scratch, kept across calls: allocating it per call cost a page fault per 4 KiB of sums and the
// unmapping's TLB shootdown (sums of 8 live rows x 1536 columns are 48 KiB; glibc maps 128 KiB and more).
// Types of this namespace only: the standard library code instantiated for them here is this ISA's and this
// file's alone (scripts/check-isa-isolation.sh).
struct alignas(64) SumSlot {
  float lanes[16];
};
struct Scratch {
  std::vector<SumSlot> sums;                        // per column tile: (rows, 32) and a line
  std::array<int32_t, kMaxDepth / 2 * kMaxRows> x;  // (kMaxDepth / 2, kMaxRows)
};
Scratch& thread_scratch() {
  static thread_local Scratch scratch;
  return scratch;
}

// The columns of an item of a part `part_cols` wide: whole rows (at most kMaxChunkCols) unless `items` whole
// parts leave a thread of `threads` without two, whole column tiles either way.
int64_t chunk_cols(int64_t part_cols, int64_t items, int threads) {
  const int64_t tiles = (part_cols + kTileCols - 1) / kTileCols;
  int64_t chunks =
      std::max((part_cols + kMaxChunkCols - 1) / kMaxChunkCols, (2 * threads + items - 1) / items);
  chunks = std::clamp<int64_t>(chunks, 1, tiles);
  return (tiles + chunks - 1) / chunks * kTileCols;
}

}  // namespace

// out (rows, N) = lhs (rows, Kd) @ rhs[e] over each group's live rows (at most kMaxRows), bf16 inputs.
void nn(void* out, bool out_bf16, const bf16_t* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
        int64_t N) {
  const Call c{out, out_bf16, lhs, rhs, Kd, N};
  const int64_t part_cols = N / rhs.parts();
  int64_t live_experts = 0;
  for (int64_t e = 0; e < groups.experts; ++e) live_experts += gemm_detail::group_rows(groups, e).live > 0;
  if (live_experts == 0 || part_cols == 0) return;
  const int threads = omp_get_max_threads();
  const int64_t chunk = chunk_cols(part_cols, live_experts * rhs.parts(), threads);
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
    Scratch& scratch = thread_scratch();
    const size_t vectors = size_t(chunk / kTileCols * tile_sums(kMaxRows) / 16);
    if (scratch.sums.size() < vectors) scratch.sums.resize(vectors);
    for (int64_t i = count * t / n; i < count * (t + 1) / n; ++i)
      run_item(c, items[size_t(i)], reinterpret_cast<float*>(scratch.sums.data()), scratch.x.data());
  }
}

}  // namespace moe::cpu::isa_avx512_bf16::gemv

#pragma GCC pop_options

// The variant's entry points and answers: build-ISA code (the registry and --list call them on any CPU).
namespace moe::gemv {

using namespace gemm_detail;  // at, check_groups, group_rows, zero_padding_rows

void grouped_gemm_nn(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* lhs,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  check_groups(groups, Kd, N);
  MOE_CHECK(in_dtype == Dtype::bf16, "gemv takes bf16 inputs");
  cpu::isa_avx512_bf16::gemv::nn(out, out_dtype == Dtype::bf16, static_cast<const bf16_t*>(lhs), rhs, groups,
                                 Kd, N);
  for (int64_t e = 0; e < groups.experts; ++e) zero_padding_rows(out, out_dtype, group_rows(groups, e), N);
}

void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool /*keep_h*/) {
  grouped_gemm_nn(k, h, out_dtype, lhs, rhs, in_dtype, groups, Kd, 2 * M);
  // One pass over every row (a pass per group wakes the threads once per expert: 128 experts, 13 ms of a
  // 2 ms forward under a passive wait policy), then the padding rows' g as zeros whatever their weights.
  const int64_t rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
  cpu::swiglu_forward(g, out_dtype, {h, at(h, M, out_dtype), 2 * M}, out_dtype, rows, M, row_weight);
  for (int64_t e = 0; e < groups.experts; ++e) zero_padding_rows(g, out_dtype, group_rows(groups, e), M);
}

std::string gemm_library_version() {
  return "moe-bench AVX-512 BF16 row-streaming kernel";
}

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  if (call.form != GemmForm::nn && call.form != GemmForm::nn_swiglu) return "nn and nn_swiglu only";
  if (call.in_dtype != Dtype::bf16) return "bfloat16 inputs only";
  if (call.out_dtype != Dtype::bf16 && call.out_dtype != Dtype::f32)
    return "a float32 or bfloat16 output only";
  if (call.rows > cpu::isa_avx512_bf16::gemv::kMaxRows)
    return "a group of " + std::to_string(call.rows) + " rows, above its " +
           std::to_string(cpu::isa_avx512_bf16::gemv::kMaxRows);
  if (call.Kd == 0) return "an empty reduction";
  return "";
}

std::string unavailable() {
  return needs_isa(IsaLevel::avx512_bf16, "AVX-512 BF16");
}

bool bf16_arithmetic() {
  return true;
}

bool same_sums_on_any_thread_count() {
  return true;  // threads split columns, never a sum
}

bool auto_candidate() {
  return true;
}

}  // namespace moe::gemv

#endif
