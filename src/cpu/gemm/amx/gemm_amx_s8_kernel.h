// The amx variant's int8 GEMM (cpu/gemm/gemm.h's nn_s8) on AMX-INT8 tiles: TDPBSSD multiplies s8 A and B
// tiles into int32 accumulator tiles. Written once against the tile layer (cpu/gemm/amx/amx_tiles.h) like the
// bf16 kernel (cpu/gemm/amx/gemm_amx_kernel.h): the hardware's tiles (src/cpu/gemm/amx/gemm_amx_s8.cpp) or
// their plain C++ emulation (src/cpu/gemm/portable/gemm_amx_s8_emulated.cpp, the tests' instance).
//
// Exact: TDPBSSD sums s8 x s8 products straight into int32 (no int16 pair sums that could saturate, as
// AVX2's vpmaddubsw has), so the sums are exact whenever the total fits int32 (nn_s8's contract), and the
// epilogue is the reference's three float32 steps (src/ref/int8_gemm.cpp) in its order, so the output
// equals the reference bit for bit (the file is compiled without FMA contraction, CMakeLists.txt).
//
// The bf16 kernel's work list and blocking: items (expert, column block of 64 columns, row block of 32
// rows), expert-major with row blocks innermost, cut into one contiguous range of equal items per thread;
// an item is two register blocks of 32 rows x 32 columns (four accumulator tiles fed by two A and two B
// tiles). B tiles: per tile, chunks of 64 reduction elements, each 16 quad rows x 16 columns x 4 (the (K/4,
// N, 4) layout TDPBSSD reads), zeros past Kd and past N; kept weights (Int8Operands::rhs_packs) are packed
// once, else a thread packs a group of column blocks when its item's group changes. A rows are loaded where
// they lie when a block has 32 live rows and Kd is a multiple of 64, else staged in a zero-padded block.
// Padding rows are zeros (left alone when accumulating, as the reference). The epilogues run in AVX-512
// vectors where the instance has AVX-512 BF16 (the hardware one always), the same float32 steps, each
// register block's a few rows after each chunk of the next block's products (Parts::multiply_overlapped).
#pragma once

#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/amx/amx_kernel_parts.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/work_shares.h"
#include "cpu/ops/quantize_row.h"
#include "cpu/ops/vec_math.h"
#include "moe/dtype.h"

namespace moe::amx {

template <class Tiles>
struct AmxS8Gemm {
  using Parts = AmxKernelParts<Tiles>;
  static constexpr int64_t kDepth = 64;               // reduction elements of an A tile row (64 bytes)
  static constexpr int64_t kQuad = 4;                 // reduction elements of a B tile element group
  static constexpr int64_t kTileCols = 16;            // columns of a B tile and an accumulator
  static constexpr int64_t kTileBytes = 16 * kDepth;  // one A or B tile
  static constexpr int64_t kBlockRows = 32;           // rows of a register block: two A tiles
  static constexpr int64_t kItemTiles = 4;            // B tiles of an item: two register blocks of two
  static constexpr int64_t kItemCols = kItemTiles * kTileCols;

  struct Call {
    void* out;        // (rows, N) in out_dtype
    Dtype out_dtype;  // f32 or bf16
    Int8Operands in;  // lhs (rows, Kd), rhs (E, Kd, N), their scales
    GroupedShape groups;
    int64_t Kd, N;
    bool accumulate;  // out's live rows += the product (float32 out)
    bool stream;      // out's whole 64-byte lines leave with non-temporal stores (not accumulating)
  };

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

  // B tile i of a pack: `count` (<= 16) columns of the weights from `first` (0: none).
  struct TileSource {
    const int8_t* first;
    int64_t count;
  };
  // Packs tiles[i] (weights of Kd rows, ld apart) into dst + i * chunks * kTileBytes, one B tile per 64
  // reduction elements ((chunks, 16, 16, 4) each), zeros past Kd and past count: a quad row across every tile
  // before the next, so the weights' rows are read along their columns (packed a tile at a time, a pack read
  // 16 bytes of each row, rows ld apart, and DRAM pages held it: the seed's up projection, packed per call,
  // took 1.9x the time packed once, AMX Xeon).
  static void pack_tiles(const std::vector<TileSource>& tiles, int64_t ld, int64_t Kd, int64_t chunks,
                         int8_t* dst) {
    for (int64_t k = 0; k < chunks * kDepth; k += kQuad)
      for (size_t t = 0; t < tiles.size(); ++t) {
        const TileSource& src = tiles[t];
        int8_t* d = dst + int64_t(t) * chunks * kTileBytes + k * kTileCols;  // quad row k / 4: 16 columns x 4
        if (src.count == kTileCols && k + kQuad <= Kd) {
          interleave_quads(src.first + k * ld, ld, d);
          continue;
        }
        for (int64_t n = 0; n < kTileCols; ++n)
          for (int64_t i = 0; i < kQuad; ++i)
            d[kQuad * n + i] = n < src.count && k + i < Kd ? src.first[(k + i) * ld + n] : int8_t(0);
      }
  }

  // d (16 columns x 4) = the 16 bytes of rows r, r + ld, r + 2 ld, r + 3 ld, column by column: SSE2
  // (every x86-64 CPU, so the emulated instance runs it too) byte, then word interleaves.
  static void interleave_quads(const int8_t* r, int64_t ld, int8_t* d) {
    auto row = [&](int64_t i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + i * ld)); };
    const __m128i r0 = row(0), r1 = row(1), r2 = row(2), r3 = row(3);
    const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);  // columns 0-7, 8-15
    const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
    __m128i* out = reinterpret_cast<__m128i*>(d);
    _mm_storeu_si128(out, _mm_unpacklo_epi16(lo01, lo23));      // columns 0-3
    _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo01, lo23));  // 4-7
    _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi01, hi23));  // 8-11
    _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi01, hi23));  // 12-15
  }

  // Rows [0, n) of a (n, Kd) block -> (32, depth), zeros past n and Kd.
  static void stage_rows(const int8_t* src, int64_t n, int64_t Kd, int64_t depth, int8_t* dst) {
    for (int64_t r = 0; r < kBlockRows; ++r) {
      int8_t* d = dst + r * depth;
      const int64_t have = r < n ? Kd : 0;
      if (have > 0) std::memcpy(d, src + r * Kd, size_t(have));
      std::memset(d + have, 0, size_t(depth - have));
    }
  }

  // A register block whose sums wait for their epilogue: register block s of an item, acc (n, 32) for rows
  // [r0, r0 + n) of expert e's output, columns cb * 64 + s * 32 + [0, 32).
  struct Block {
    const int32_t* acc;
    int64_t e, r0, n, cb, s;
  };

  // Rows [from, to) of block k to the output, dequantized as the reference does.
  static void epilogue(const Call& c, const Block& k, int64_t from, int64_t to) {
    const int32_t* acc = k.acc;
    const int64_t e = k.e, r0 = k.r0, cb = k.cb, s = k.s;
    const int64_t c0 = cb * kItemCols + s * 2 * kTileCols, cols = std::min<int64_t>(2 * kTileCols, c.N - c0);
    const float* rhs_scale = c.in.rhs_scale + (c.in.rhs_scale_per_column ? e * c.N + c0 : e);
    const int64_t scale_step = c.in.rhs_scale_per_column ? 1 : 0;
#if defined(MOE_VEC_AVX512BF16)
    const int64_t size = dtype_size(c.out_dtype);
    const __mmask16 mask[2] = {Parts::first_lanes(cols), Parts::first_lanes(cols - kTileCols)};
    __m512 scale[2];  // columns c0 + [0, 16) and c0 + [16, 32)
    for (int h = 0; h < 2; ++h)
      scale[h] =
          scale_step ? _mm512_maskz_loadu_ps(mask[h], rhs_scale + h * kTileCols) : _mm512_set1_ps(*rhs_scale);
    for (int64_t r = from; r < to; ++r) {
      const int64_t row = r0 + r;
      const int32_t* sums = acc + r * 2 * kTileCols;
      const __m512 lo = dequantized(sums, c.in.lhs_scale[row], scale[0]),
                   hi = dequantized(sums + kTileCols, c.in.lhs_scale[row], scale[1]);
      char* dst = static_cast<char*>(c.out) + (row * c.N + c0) * size;
      if (c.stream && mask[1] == 0xffff && (reinterpret_cast<uintptr_t>(dst) & 63) == 0) {
        Parts::stream_line(dst, c.out_dtype, lo, hi);
        continue;
      }
      Parts::store16(dst, c.out_dtype, lo, mask[0], c.accumulate);
      if (mask[1]) Parts::store16(dst + kTileCols * size, c.out_dtype, hi, mask[1], c.accumulate);
    }
    return;
#endif
    for (int64_t r = from; r < to; ++r) {
      const int64_t row = r0 + r;
      const float ls = c.in.lhs_scale[row];
      const int32_t* sums = acc + r * 2 * kTileCols;
      for (int64_t j = 0; j < cols; ++j) {
        Parts::store_result(c.out, row * c.N + c0 + j, c.out_dtype,
                            float(float(sums[j]) * ls) * rhs_scale[j * scale_step], c.accumulate);
      }
    }
  }

#if defined(MOE_VEC_AVX512BF16)
  // 16 sums dequantized as the reference's two rounded steps: float(float(sum) * lhs_scale) * rhs_scale.
  static __m512 dequantized(const int32_t* sums, float lhs_scale, __m512 rhs_scale) {
    const __m512 sum = _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), _mm512_loadu_si512(sums));
    return _mm512_mul_ps(_mm512_mul_ps(sum, _mm512_set1_ps(lhs_scale)), rhs_scale);
  }
  // v as dt stores it, back in float32.
  static __m512 as_stored16(__m512 v, Dtype dt) {
    return dt == Dtype::bf16 ? cpu::bf16_to_f32(Parts::bf16_words(v)) : v;
  }
#endif

  // stream_bytes: outputs of this many bytes or more stream (GemmThresholds::amx_stream_bytes; at the
  // reference layer's up projection, a 64 MiB bf16 out, 1.3x faster).
  static void nn_s8(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd, int64_t N,
                    bool accumulate, int64_t stream_bytes) {
    MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "amx nn_s8: float32 or bfloat16 out");
    MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "amx nn_s8: accumulates in a float32 out only");
    gemm_detail::check_groups(groups, Kd, N);
    const int64_t rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
    const bool stream = !accumulate && rows * N * int64_t(dtype_size(out_dtype)) >= stream_bytes;
    run({out, out_dtype, in, groups, Kd, N, accumulate, stream});
  }

  static void run(const Call& c) {
    const int64_t E = c.groups.experts, chunks = ceil_div(c.Kd, kDepth);
    const typename Parts::Items items(E, ceil_div(c.N, kItemCols), [&](int64_t e) {
      return ceil_div(gemm_detail::group_rows(c.groups, e).live, kBlockRows);
    });
    const int8_t* kept = c.in.rhs_packs ? kept_panels(c, items.col_blocks, chunks) : nullptr;
    gemm_detail::WorkShares shares(items.first.back(), omp_get_max_threads());
#pragma omp parallel
    {
      if (!c.accumulate) {
#pragma omp for schedule(static) nowait
        for (int64_t e = 0; e < E; ++e)
          gemm_detail::zero_padding_rows(c.out, c.out_dtype, gemm_detail::group_rows(c.groups, e), c.N);
      }
      const int t = omp_get_thread_num();
      run_items(c, items, shares, t, chunks, kept);  // Kd = 0: zero tiles, stored
    }
  }

  // The B tiles of expert e's column blocks [cb0, cb1) (panel: (cb1 - cb0, 4, chunks, 16, 16, 4)).
  static void pack_blocks(const Call& c, int64_t e, int64_t cb0, int64_t cb1, int64_t chunks, int8_t* panel) {
    std::vector<TileSource> tiles;
    for (int64_t col = cb0 * kItemCols; col < cb1 * kItemCols; col += kTileCols)
      tiles.push_back(
          {c.in.rhs + e * c.Kd * c.N + std::min(col, c.N), std::clamp<int64_t>(c.N - col, 0, kTileCols)});
    pack_tiles(tiles, c.N, c.Kd, chunks, panel);
  }
  // Column blocks a thread packs at once, per call: up to 1 MiB of B tiles (in L2), whose rows it reads
  // along.
  static int64_t group_blocks(int64_t col_blocks, int64_t chunks) {
    constexpr int64_t kGroupBytes = int64_t(1) << 20;
    const int64_t block_bytes = kItemTiles * std::max<int64_t>(chunks, 1) * kTileBytes;  // Kd 0: no chunk
    return std::clamp<int64_t>(kGroupBytes / block_bytes, 1, std::max<int64_t>(col_blocks, 1));
  }

  // Every item's panel (E, col_blocks, 4, chunks, 16, 16, 4), packed on the first call with these packs
  // (Int8Operands::rhs_packs: int8_routed_prequant's kept weights).
  static const int8_t* kept_panels(const Call& c, int64_t col_blocks, int64_t chunks) {
    const std::string layout = "amx s8 B tiles";
    const int64_t E = c.groups.experts, panel_bytes = kItemTiles * chunks * kTileBytes;
    if (const uint8_t* found = c.in.rhs_packs->find(layout, c.in.rhs, E, c.Kd, c.N))
      return reinterpret_cast<const int8_t*>(found);
    auto* dst = reinterpret_cast<int8_t*>(
        c.in.rhs_packs->make(layout, c.in.rhs, E, c.Kd, c.N, size_t(E * col_blocks * panel_bytes)));
#pragma omp parallel for schedule(dynamic)
    for (int64_t e = 0; e < E; ++e)
      pack_blocks(c, e, 0, col_blocks, chunks, dst + e * col_blocks * panel_bytes);
    return dst;
  }

  // Thread t's items of the work list (its contiguous share, then those others left: WorkShares); kept: the
  // weights' panels (kept_panels), or nullptr (an item's packed here when its (expert, column block)
  // changes).
  static void run_items(const Call& c, const typename Parts::Items& items, gemm_detail::WorkShares& shares,
                        int t, int64_t chunks, const int8_t* kept) {
    const int64_t depth = chunks * kDepth, panel_bytes = kItemTiles * chunks * kTileBytes;
    const int64_t group = group_blocks(items.col_blocks, chunks);
    std::vector<int8_t> panel(kept ? 0 : size_t(group * panel_bytes));  // (group, 4, chunks, 16, 16, 4)
    std::vector<int8_t> staged(size_t(kBlockRows * depth));             // (32, depth)
    alignas(64) int32_t acc[2][kBlockRows * 2 * kTileCols];  // (32, 32): a block's sums, the block before's
    Block pending{};  // its epilogue runs between the next block's chunks, while the tile unit multiplies
    int slot = 0;
    int64_t e = 0;
    int64_t packed_e = -1, packed_group = -1;
    Tiles::configure();
    for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) {
      if (i < items.first[size_t(e)] || i >= items.first[size_t(e + 1)]) e = items.expert_of(i);
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t row_blocks = items.row_blocks(e);
      const int64_t local = i - items.first[size_t(e)], cb = local / row_blocks, rb = local % row_blocks;
      int64_t cols[kItemTiles];  // each tile's valid columns
      for (int64_t t = 0; t < kItemTiles; ++t)
        cols[t] = std::clamp<int64_t>(c.N - (cb * kItemCols + t * kTileCols), 0, kTileCols);
      const int64_t cb0 = cb / group * group;
      if (!kept && (e != packed_e || cb0 != packed_group))
        pack_blocks(c, e, cb0, std::min(items.col_blocks, cb0 + group), chunks, panel.data());
      packed_e = e;
      packed_group = cb0;
      const int8_t* b_tiles =
          kept ? kept + (e * items.col_blocks + cb) * panel_bytes : panel.data() + (cb - cb0) * panel_bytes;
      const int64_t n = std::min(kBlockRows, g.live - rb * kBlockRows), r0 = g.row0 + rb * kBlockRows;
      const int8_t* a = c.in.lhs + r0 * c.Kd;
      int64_t ld = c.Kd;
      if (n < kBlockRows || depth != c.Kd) {
        stage_rows(a, n, c.Kd, depth, staged.data());
        a = staged.data();
        ld = depth;
      }
      for (int64_t s = 0; s < 2; ++s) {
        if (cols[2 * s] == 0) break;  // past the last column
        const int8_t* b = b_tiles + 2 * s * chunks * kTileBytes;
        Parts::template multiply_overlapped<TileDot::s8>(
            a, ld, n, b, b + chunks * kTileBytes, chunks, kept != nullptr, acc[slot], pending.n,
            [&](int64_t from, int64_t to) { epilogue(c, pending, from, to); });
        pending = {acc[slot], e, r0, n, cb, s};
        slot ^= 1;
      }
    }
    epilogue(c, pending, 0, pending.n);
    Tiles::release();
    if (c.stream) cpu::end_streams();  // the non-temporal stores, before the region's barrier
  }

  // ---- nn_s8_swiglu (cpu/gemm/gemm.h)
  // ------------------------------------------------------------------------ A register block's two B tiles
  // are 16 gate columns and the same 16 up columns, so its accumulators hold a row's gate and up sums side by
  // side; the epilogue dequantizes them, rounds them as h stores them, and makes g = silu(gate) * up *
  // row_weight from those. An item is one row block of an expert over all of its columns (g's rows are
  // quantized whole): a thread packs an expert's weights once, for all its columns, when its range of items
  // reaches that expert, keeps the block's rows of g in a staging buffer, and quantizes and writes them when
  // the block is done.
  struct SwigluCall {
    S8SwigluOut out;
    Dtype dt;  // h's and g's
    Int8Operands in;
    Int8UpPart up;
    GroupedShape groups;
    int64_t Kd, M;
    const float* row_weight;
    bool stream;  // g's rows leave with non-temporal stores (flush_g)
  };

  // Tile v (0: gate, 1: up) of g's columns [j0, j0 + 16) of expert e: its weights (Kd, ld) and scales.
  static const int8_t* swiglu_weights(const SwigluCall& c, int64_t e, int v, int64_t j0, int64_t& ld) {
    if (c.up.rhs) {
      ld = c.M;
      return (v ? c.up.rhs : c.in.rhs) + e * c.Kd * c.M + j0;
    }
    ld = 2 * c.M;
    return c.in.rhs + e * c.Kd * 2 * c.M + v * c.M + j0;
  }
  // Tile v's scale of g's column j: its column's (per-column scales) or its expert's.
  static const float* swiglu_scale(const SwigluCall& c, int64_t e, int v, int64_t j) {
    const float* scales = c.up.rhs && v ? c.up.rhs_scale : c.in.rhs_scale;
    if (!c.in.rhs_scale_per_column) return scales + e;
    return scales + (c.up.rhs ? e * c.M + j : e * 2 * c.M + v * c.M + j);
  }
  static float as_stored(float v, Dtype dt) {
    return dt == Dtype::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
  }

  // A register block whose sums wait for their epilogue: acc (n, 32: 16 gate | 16 up sums) for g's columns
  // [j0, j0 + count) of rows [r0, r0 + n) of expert e, staged in g_stage (as stored: dt, rows M apart).
  struct SwigluBlock {
    const int32_t* acc;
    int64_t e, r0, n, j0, count;
    char* g_stage;
  };

  // Rows [from, to) of block k's epilogue: h (where kept) and the staged rows of g (as stored).
  // In AVX-512 vectors where the instance has AVX-512 BF16 (the hardware one always): a scalar exp and a
  // dtype branch an element made the fused form 0.51-0.55x nn_s8 and the SwiGLU pass (AMX Xeon, 2 threads).
  static void swiglu_epilogue(const SwigluCall& c, const SwigluBlock& k, int64_t from, int64_t to) {
    const int32_t* acc = k.acc;
    const int64_t e = k.e, r0 = k.r0, j0 = k.j0, count = k.count;
    char* g_stage = k.g_stage;
#if defined(MOE_VEC_AVX512BF16)
    const __mmask16 mask = Parts::first_lanes(count);
    const int64_t size = dtype_size(c.dt);
    __m512 scale[2];
    for (int v = 0; v < 2; ++v)
      scale[v] = c.in.rhs_scale_per_column ? _mm512_maskz_loadu_ps(mask, swiglu_scale(c, e, v, j0))
                                           : _mm512_set1_ps(*swiglu_scale(c, e, v, j0));
    for (int64_t r = from; r < to; ++r) {
      const int64_t row = r0 + r;
      const float ls = c.in.lhs_scale[row], w = c.row_weight ? c.row_weight[row] : 1.0f;
      const int32_t* sums = acc + r * 2 * kTileCols;
      const __m512 gate = as_stored16(dequantized(sums, ls, scale[0]), c.dt),
                   up = as_stored16(dequantized(sums + kTileCols, ls, scale[1]), c.dt);
      if (c.out.keep_h) {
        char* h_row = static_cast<char*>(c.out.h) + row * 2 * c.M * size;
        Parts::store16(h_row + j0 * size, c.dt, gate, mask);
        Parts::store16(h_row + (c.M + j0) * size, c.dt, up, mask);
      }
      const __m512 g =
          _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gate, cpu::sigmoid16(gate)), up), _mm512_set1_ps(w));
      Parts::store16(g_stage + (r * c.M + j0) * size, c.dt, g, mask);
    }
    return;
#endif
    for (int64_t r = from; r < to; ++r) {
      const int64_t row = r0 + r;
      const float ls = c.in.lhs_scale[row], w = c.row_weight ? c.row_weight[row] : 1.0f;
      const int32_t* sums = acc + r * 2 * kTileCols;
      for (int64_t j = 0; j < count; ++j) {
        const float gate = as_stored(float(float(sums[j]) * ls) * *swiglu_scale(c, e, 0, j0 + j), c.dt);
        const float up =
            as_stored(float(float(sums[kTileCols + j]) * ls) * *swiglu_scale(c, e, 1, j0 + j), c.dt);
        if (c.out.keep_h) {
          Parts::store_result(c.out.h, row * 2 * c.M + j0 + j, c.dt, gate);
          Parts::store_result(c.out.h, row * 2 * c.M + c.M + j0 + j, c.dt, up);
        }
        Parts::store_result(g_stage, r * c.M + j0 + j, c.dt, gate / (1.0f + std::exp(-gate)) * up * w);
      }
    }
  }

  // The item's staged rows of g (as stored: dt) -> g's rows [r0, r0 + n), and g's rows quantized as
  // moe/quantize.h's quantize_rows does (cpu/ops/quantize_row.h: bitwise the reference's). g's rows go out
  // with non-temporal stores where they are whole lines of bf16 and g is large (nothing reads them in the
  // call; stored, each line was read first). Spread over the next item's products in place of after them,
  // the same work took 5 % more time (ref up, AMX Xeon).
  static void flush_g(const SwigluCall& c, const char* g_stage, int64_t r0, int64_t n) {
    const int64_t row_bytes = c.M * int64_t(dtype_size(c.dt));
    for (int64_t r = 0; r < n; ++r) {
      const char* g = g_stage + r * row_bytes;
      const int64_t row = r0 + r;
      char* g_row = static_cast<char*>(c.out.g) + row * row_bytes;
      if (c.stream)
        cpu::stream_copy(g_row, g, size_t(row_bytes));
      else
        std::memcpy(g_row, g, size_t(row_bytes));
      c.out.g_scale[row] = cpu::quantize_block(c.out.gq + row * c.M, g, c.dt, 0, c.M);
    }
  }

  static void nn_s8_swiglu(S8SwigluOut out, Dtype dt, Int8Operands in, Int8UpPart up, GroupedShape groups,
                           int64_t Kd, int64_t M, const float* row_weight, int64_t stream_bytes) {
    MOE_CHECK(dt == Dtype::f32 || dt == Dtype::bf16, "amx nn_s8_swiglu: float32 or bfloat16 h and g");
    gemm_detail::check_groups(groups, Kd, 2 * M);
    gemm_detail::write_s8_swiglu_padding(out, dt, groups, M);
    const int64_t total_rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
    const bool stream = total_rows * M * int64_t(dtype_size(dt)) >= stream_bytes &&
                        cpu::streams_bf16_rows(dt, M, out.g);  // every row: M * 2 bytes are whole lines
    const SwigluCall c{out, dt, in, up, groups, Kd, M, row_weight, stream};
    const int64_t rows = swiglu_item_rows(M, dt);
    const typename Parts::Items items(groups.experts, 1, [&](int64_t e) {
      return ceil_div(gemm_detail::group_rows(groups, e).live, rows);
    });
    const int8_t* kept = in.rhs_packs ? kept_swiglu_panels(c) : nullptr;
    gemm_detail::WorkShares shares(items.first.back(), omp_get_max_threads());
#pragma omp parallel
    {
      const int t = omp_get_thread_num();
      run_swiglu_items(c, items, rows, shares, t, kept);
    }
  }

  // The rows of an nn_s8_swiglu item: a multiple of 32 whose rows of g (as stored, staged until quantized)
  // fill up to 512 KiB, so they stay in L2 with the item's lhs rows while every column block runs over them.
  static int64_t swiglu_item_rows(int64_t M, Dtype dt) {
    constexpr int64_t kStageBytes = 512 << 10;
    const int64_t fit = kStageBytes / (std::max<int64_t>(M, 1) * int64_t(dtype_size(dt)));
    return std::clamp<int64_t>(fit / kBlockRows * kBlockRows, kBlockRows, 8 * kBlockRows);
  }

  // Bytes of expert e's gate and up B tiles: (blocks, gate | up, chunks, 16, 16, 4).
  static int64_t swiglu_panel_bytes(const SwigluCall& c) {
    return ceil_div(c.M, kTileCols) * 2 * ceil_div(c.Kd, kDepth) * kTileBytes;
  }
  static void pack_swiglu_expert(const SwigluCall& c, int64_t e, int8_t* panel) {
    std::vector<TileSource> tiles;
    int64_t ld = 0;
    for (int64_t j0 = 0; j0 < c.M; j0 += kTileCols)
      for (int v = 0; v < 2; ++v)
        tiles.push_back({swiglu_weights(c, e, v, j0, ld), std::min(kTileCols, c.M - j0)});
    pack_tiles(tiles, ld, c.Kd, ceil_div(c.Kd, kDepth), panel);
  }
  // Every expert's panel, packed on the first call with these packs (int8_routed_prequant's kept weights).
  static const int8_t* kept_swiglu_panels(const SwigluCall& c) {
    const std::string layout = "amx s8 B tiles, gate and up";
    const int64_t E = c.groups.experts, bytes = swiglu_panel_bytes(c);
    WeightPacks* packs = c.in.rhs_packs;
    if (const uint8_t* found = packs->find(layout, c.in.rhs, E, c.Kd, 2 * c.M))
      return reinterpret_cast<const int8_t*>(found);
    auto* dst = reinterpret_cast<int8_t*>(packs->make(layout, c.in.rhs, E, c.Kd, 2 * c.M, size_t(E * bytes)));
#pragma omp parallel for schedule(dynamic)
    for (int64_t e = 0; e < E; ++e) pack_swiglu_expert(c, e, dst + e * bytes);
    return dst;
  }

  // Thread t's items (up to `item_rows` rows of an expert each, all columns), as run_items takes them: each
  // column block's gate and up tiles run over the item's row blocks in turn (in L1 meanwhile), each register
  // block's epilogue during the next block's products, the rows of g wait in g_stage, quantized when the
  // item is done. kept: every expert's panel, or nullptr (a thread packs an expert's when its items reach
  // it).
  static void run_swiglu_items(const SwigluCall& c, const typename Parts::Items& items, int64_t item_rows,
                               gemm_detail::WorkShares& shares, int t, const int8_t* kept) {
    const int64_t chunks = ceil_div(c.Kd, kDepth), depth = chunks * kDepth;
    const int64_t blocks = ceil_div(c.M, kTileCols), size = dtype_size(c.dt);  // blocks: 16 g columns each
    std::vector<int8_t> panel(kept ? 0 : size_t(swiglu_panel_bytes(c)));
    std::vector<int8_t> staged(size_t(item_rows * depth));   // (item_rows, depth)
    Buffer<char> g_stage(size_t(item_rows * c.M * size));    // (item_rows, M) in dt
    alignas(64) int32_t acc[2][kBlockRows * 2 * kTileCols];  // a block's sums, the block before's
    int64_t e = 0, packed_e = -1;
    Tiles::configure();
    for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) {
      if (i < items.first[size_t(e)] || i >= items.first[size_t(e + 1)]) e = items.expert_of(i);
      if (!kept && e != packed_e) pack_swiglu_expert(c, e, panel.data());
      packed_e = e;
      const int8_t* expert_panel = kept ? kept + e * swiglu_panel_bytes(c) : panel.data();
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t r0 = g.row0 + (i - items.first[size_t(e)]) * item_rows;
      const int64_t rows = std::min(item_rows, g.row0 + g.live - r0);
      for (int64_t rb = 0; rb < rows; rb += kBlockRows)
        stage_rows(c.in.lhs + (r0 + rb) * c.Kd, std::min(kBlockRows, rows - rb), c.Kd, depth,
                   staged.data() + rb * depth);
      SwigluBlock pending{};
      int slot = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* gate = expert_panel + 2 * b * chunks * kTileBytes;
        for (int64_t rb = 0; rb < rows; rb += kBlockRows) {
          const int64_t n = std::min(kBlockRows, rows - rb);
          Parts::template multiply_overlapped<TileDot::s8>(
              staged.data() + rb * depth, depth, n, gate, gate + chunks * kTileBytes, chunks, kept != nullptr,
              acc[slot], pending.n, [&](int64_t from, int64_t to) { swiglu_epilogue(c, pending, from, to); });
          const int64_t j0 = b * kTileCols;
          pending = {
              acc[slot], e, r0 + rb, n, j0, std::min(kTileCols, c.M - j0), g_stage.data() + rb * c.M * size};
          slot ^= 1;
        }
      }
      swiglu_epilogue(c, pending, 0, pending.n);
      flush_g(c, g_stage.data(), r0, rows);
    }
    Tiles::release();
    if (c.stream) cpu::end_streams();  // the non-temporal stores, before the region's barrier
  }
};

}  // namespace moe::amx

// Defines cpu/gemm/gemm.h's nn_s8_swiglu (gemm_variants.h's MOE_DECLARE_GEMM_NN_S8_SWIGLU) in the enclosing
// namespace on AmxS8Gemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_NN_S8_SWIGLU(Tiles)                                                              \
  void grouped_gemm_nn_s8_swiglu(const GemmThresholds& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in, \
                                 Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,                  \
                                 const float* row_weight) {                                                  \
    ::moe::amx::AmxS8Gemm<Tiles>::nn_s8_swiglu(out, out_dtype, in, up, groups, Kd, M, row_weight,            \
                                               k.amx_stream_bytes);                                          \
  }

// Defines cpu/gemm/gemm.h's nn_s8 (gemm_variants.h's MOE_DECLARE_GEMM_NN_S8) in the enclosing namespace on
// AmxS8Gemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)                                                                    \
  void grouped_gemm_nn_s8(const GemmThresholds& k, void* out, Dtype out_dtype, Int8Operands in,             \
                          GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {                    \
    ::moe::amx::AmxS8Gemm<Tiles>::nn_s8(out, out_dtype, in, groups, Kd, N, accumulate, k.amx_stream_bytes); \
  }
