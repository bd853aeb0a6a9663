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
// tiles). A thread packs its item's four B tiles when the item's (expert, column block) changes: per
// tile, chunks of 64 reduction elements, each 16 quad rows x 16 columns x 4 (the (K/4, N, 4) layout
// TDPBSSD reads), zeros past Kd and past N. A rows are loaded where they lie when a block has 32 live
// rows and Kd is a multiple of 64, else staged in a zero-padded block. Padding rows are zeros (left
// alone when accumulating, as the reference).
#pragma once

#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/gemm/amx/amx_kernel_parts.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/work_shares.h"
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
  };

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

  // Packs `count` columns of w (Kd rows, ld apart) into one B tile per 64 reduction elements (dst: (chunks,
  // 16, 16, 4)), zeros past Kd and past count.
  static void pack_tile(const int8_t* w, int64_t ld, int64_t Kd, int64_t count, int64_t chunks, int8_t* dst) {
    for (int64_t k = 0; k < chunks * kDepth; k += kQuad) {
      int8_t* d = dst + k * kTileCols;  // quad row k / 4: 16 columns x 4
      if (count == kTileCols && k + kQuad <= Kd) {
        interleave_quads(w + k * ld, ld, d);
        continue;
      }
      for (int64_t n = 0; n < kTileCols; ++n)
        for (int64_t i = 0; i < kQuad; ++i)
          d[kQuad * n + i] = n < count && k + i < Kd ? w[(k + i) * ld + n] : int8_t(0);
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

  // Register block s of an item: acc (n, 32) to rows [r0, r0 + n) of expert e's output, columns
  // cb * 64 + s * 32 + [0, 32), dequantized as the reference does.
  static void epilogue(const Call& c, const int32_t* acc, int64_t e, int64_t r0, int64_t n, int64_t cb,
                       int64_t s) {
    const int64_t c0 = cb * kItemCols + s * 2 * kTileCols, cols = std::min<int64_t>(2 * kTileCols, c.N - c0);
    const float* rhs_scale = c.in.rhs_scale + (c.in.rhs_scale_per_column ? e * c.N + c0 : e);
    const int64_t scale_step = c.in.rhs_scale_per_column ? 1 : 0;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t row = r0 + r;
      const float ls = c.in.lhs_scale[row];
      const int32_t* sums = acc + r * 2 * kTileCols;
      for (int64_t j = 0; j < cols; ++j) {
        Parts::store_result(c.out, row * c.N + c0 + j, c.out_dtype,
                            float(float(sums[j]) * ls) * rhs_scale[j * scale_step], c.accumulate);
      }
    }
  }

  static void nn_s8(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd, int64_t N,
                    bool accumulate) {
    MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "amx nn_s8: float32 or bfloat16 out");
    MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "amx nn_s8: accumulates in a float32 out only");
    gemm_detail::check_groups(groups, Kd, N);
    run({out, out_dtype, in, groups, Kd, N, accumulate});
  }

  static void run(const Call& c) {
    const int64_t E = c.groups.experts, chunks = ceil_div(c.Kd, kDepth);
    const typename Parts::Items items(E, ceil_div(c.N, kItemCols), [&](int64_t e) {
      return ceil_div(gemm_detail::group_rows(c.groups, e).live, kBlockRows);
    });
    gemm_detail::WorkShares shares(items.first.back(), omp_get_max_threads());
#pragma omp parallel
    {
      if (!c.accumulate) {
#pragma omp for schedule(static) nowait
        for (int64_t e = 0; e < E; ++e)
          gemm_detail::zero_padding_rows(c.out, c.out_dtype, gemm_detail::group_rows(c.groups, e), c.N);
      }
      const int t = omp_get_thread_num();
      run_items(c, items, shares, t, chunks);  // Kd = 0: zero tiles, stored
    }
  }

  // Thread t's items of the work list (its contiguous share, then those others left: WorkShares).
  static void run_items(const Call& c, const typename Parts::Items& items, gemm_detail::WorkShares& shares,
                        int t, int64_t chunks) {
    const int64_t depth = chunks * kDepth;
    std::vector<int8_t> panel(size_t(kItemTiles * chunks * kTileBytes));  // (4, chunks, 16, 16, 4)
    std::vector<int8_t> staged(size_t(kBlockRows * depth));               // (32, depth)
    alignas(64) int32_t acc[kBlockRows * 2 * kTileCols];                  // (32, 32)
    int64_t e = 0;
    int64_t packed_e = -1, packed_cb = -1;
    Tiles::configure();
    for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) {
      if (i < items.first[size_t(e)] || i >= items.first[size_t(e + 1)]) e = items.expert_of(i);
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t row_blocks = items.row_blocks(e);
      const int64_t local = i - items.first[size_t(e)], cb = local / row_blocks, rb = local % row_blocks;
      int64_t cols[kItemTiles];  // each tile's valid columns
      for (int64_t t = 0; t < kItemTiles; ++t) {
        const int64_t col = cb * kItemCols + t * kTileCols;
        cols[t] = std::clamp<int64_t>(c.N - col, 0, kTileCols);
        if (e != packed_e || cb != packed_cb)
          pack_tile(c.in.rhs + e * c.Kd * c.N + col, c.N, c.Kd, cols[t], chunks,
                    panel.data() + t * chunks * kTileBytes);
      }
      packed_e = e;
      packed_cb = cb;
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
        const int8_t* b = panel.data() + 2 * s * chunks * kTileBytes;
        Parts::template multiply<TileDot::s8>(a, ld, n, b, b + chunks * kTileBytes, chunks, false, acc);
        epilogue(c, acc, e, r0, n, cb, s);
      }
    }
    Tiles::release();
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
  static float swiglu_scale(const SwigluCall& c, int64_t e, int v, int64_t j) {
    const float* scales = c.up.rhs && v ? c.up.rhs_scale : c.in.rhs_scale;
    if (!c.in.rhs_scale_per_column) return scales[e];
    return c.up.rhs ? scales[e * c.M + j] : scales[e * 2 * c.M + v * c.M + j];
  }
  static float as_stored(float v, Dtype dt) {
    return dt == Dtype::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
  }

  // The register block of acc (n, 32: 16 gate | 16 up sums) for g's columns [j0, j0 + count) of rows
  // [r0, r0 + n): h (where kept) and the staged rows of g (g_stage, M apart, as stored).
  static void swiglu_epilogue(const SwigluCall& c, const int32_t* acc, int64_t e, int64_t r0, int64_t n,
                              int64_t j0, int64_t count, float* g_stage) {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t row = r0 + r;
      const float ls = c.in.lhs_scale[row], w = c.row_weight ? c.row_weight[row] : 1.0f;
      const int32_t* sums = acc + r * 2 * kTileCols;
      for (int64_t j = 0; j < count; ++j) {
        const float gate = as_stored(float(float(sums[j]) * ls) * swiglu_scale(c, e, 0, j0 + j), c.dt);
        const float up =
            as_stored(float(float(sums[kTileCols + j]) * ls) * swiglu_scale(c, e, 1, j0 + j), c.dt);
        if (c.out.keep_h) {
          Parts::store_result(c.out.h, row * 2 * c.M + j0 + j, c.dt, gate);
          Parts::store_result(c.out.h, row * 2 * c.M + c.M + j0 + j, c.dt, up);
        }
        g_stage[r * c.M + j0 + j] = as_stored(gate / (1.0f + std::exp(-gate)) * up * w, c.dt);
      }
    }
  }

  // The block's staged rows of g -> g, and g's rows quantized as moe/quantize.h's quantize_rows does: scale =
  // amax / 127 + FLT_MIN, q = clip(round_half_even(x / scale), -127, 127) by a float32 division (rounded by
  // the 1.5 x 2^23 addition, exact here, as cpu/ops/quantize_row.h; no library call from this ISA's code).
  static void flush_g(const SwigluCall& c, const float* g_stage, int64_t r0, int64_t n) {
    for (int64_t r = 0; r < n; ++r) {
      const float* g = g_stage + r * c.M;
      float amax = 0.0f;
      for (int64_t j = 0; j < c.M; ++j) amax = std::fabs(g[j]) > amax ? std::fabs(g[j]) : amax;
      const float scale = amax / 127.0f + FLT_MIN;
      c.out.g_scale[r0 + r] = scale;
      for (int64_t j = 0; j < c.M; ++j) {
        Parts::store_result(c.out.g, (r0 + r) * c.M + j, c.dt, g[j]);  // exact: g[j] is as stored
        const float q = (g[j] / scale + 12582912.0f) - 12582912.0f;
        c.out.gq[(r0 + r) * c.M + j] = int8_t(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
      }
    }
  }

  static void nn_s8_swiglu(S8SwigluOut out, Dtype dt, Int8Operands in, Int8UpPart up, GroupedShape groups,
                           int64_t Kd, int64_t M, const float* row_weight) {
    MOE_CHECK(dt == Dtype::f32 || dt == Dtype::bf16, "amx nn_s8_swiglu: float32 or bfloat16 h and g");
    gemm_detail::check_groups(groups, Kd, 2 * M);
    gemm_detail::write_s8_swiglu_padding(out, dt, groups, M);
    const SwigluCall c{out, dt, in, up, groups, Kd, M, row_weight};
    const typename Parts::Items items(groups.experts, 1, [&](int64_t e) {
      return ceil_div(gemm_detail::group_rows(groups, e).live, kBlockRows);
    });
    gemm_detail::WorkShares shares(items.first.back(), omp_get_max_threads());
#pragma omp parallel
    {
      const int t = omp_get_thread_num();
      run_swiglu_items(c, items, shares, t);
    }
  }

  // Thread t's items (one row block of an expert each, all columns), as run_items takes them.
  static void run_swiglu_items(const SwigluCall& c, const typename Parts::Items& items,
                               gemm_detail::WorkShares& shares, int t) {
    const int64_t chunks = ceil_div(c.Kd, kDepth), depth = chunks * kDepth;
    const int64_t blocks = ceil_div(c.M, kTileCols);  // register blocks: 16 g columns each
    std::vector<int8_t> panel(size_t(blocks * 2 * chunks * kTileBytes));  // (blocks, gate | up, chunks, ...)
    std::vector<int8_t> staged(size_t(kBlockRows * depth));
    std::vector<float> g_stage(size_t(kBlockRows * c.M));
    alignas(64) int32_t acc[kBlockRows * 2 * kTileCols];
    int64_t e = 0, packed_e = -1;
    Tiles::configure();
    for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) {
      if (i < items.first[size_t(e)] || i >= items.first[size_t(e + 1)]) e = items.expert_of(i);
      if (e != packed_e) {
        for (int64_t b = 0; b < blocks; ++b)
          for (int v = 0; v < 2; ++v) {
            int64_t ld = 0;
            const int8_t* w = swiglu_weights(c, e, v, b * kTileCols, ld);
            pack_tile(w, ld, c.Kd, std::min(kTileCols, c.M - b * kTileCols), chunks,
                      panel.data() + (2 * b + v) * chunks * kTileBytes);
          }
        packed_e = e;
      }
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t rb = i - items.first[size_t(e)];
      const int64_t n = std::min(kBlockRows, g.live - rb * kBlockRows), r0 = g.row0 + rb * kBlockRows;
      stage_rows(c.in.lhs + r0 * c.Kd, n, c.Kd, depth, staged.data());
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* gate = panel.data() + 2 * b * chunks * kTileBytes;
        Parts::template multiply<TileDot::s8>(staged.data(), depth, n, gate, gate + chunks * kTileBytes,
                                              chunks, false, acc);
        swiglu_epilogue(c, acc, e, r0, n, b * kTileCols, std::min(kTileCols, c.M - b * kTileCols),
                        g_stage.data());
      }
      flush_g(c, g_stage.data(), r0, n);
    }
    Tiles::release();
  }
};

}  // namespace moe::amx

// Defines cpu/gemm/gemm.h's nn_s8_swiglu (gemm_variants.h's MOE_DECLARE_GEMM_NN_S8_SWIGLU) in the enclosing
// namespace on AmxS8Gemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_NN_S8_SWIGLU(Tiles)                                                            \
  void grouped_gemm_nn_s8_swiglu(const GemmThresholds&, S8SwigluOut out, Dtype out_dtype, Int8Operands in, \
                                 Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,                \
                                 const float* row_weight) {                                                \
    ::moe::amx::AmxS8Gemm<Tiles>::nn_s8_swiglu(out, out_dtype, in, up, groups, Kd, M, row_weight);         \
  }

// Defines cpu/gemm/gemm.h's nn_s8 (gemm_variants.h's MOE_DECLARE_GEMM_NN_S8) in the enclosing namespace on
// AmxS8Gemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)                                                      \
  void grouped_gemm_nn_s8(const GemmThresholds&, void* out, Dtype out_dtype, Int8Operands in, \
                          GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {      \
    ::moe::amx::AmxS8Gemm<Tiles>::nn_s8(out, out_dtype, in, groups, Kd, N, accumulate);       \
  }
