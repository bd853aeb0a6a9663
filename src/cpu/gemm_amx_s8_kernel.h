// The amx variant's int8 GEMM (moe/gemm.h's nn_s8) on AMX-INT8 tiles: TDPBSSD multiplies s8 A and B
// tiles into int32 accumulator tiles. Written once against the tile layer (cpu/amx_tiles.h) like the bf16
// kernel (cpu/gemm_amx_kernel.h): the hardware's tiles (src/cpu/gemm_amx_s8.cpp) or their plain C++
// emulation (src/cpu/gemm_amx_s8_emulated.cpp, the tests' instance).
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
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/amx_kernel_parts.h"
#include "cpu/gemm_variants.h"
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

  // Packs columns [col, col + count) of expert e's weights (Kd, N) into one B tile per 64 reduction
  // elements (dst: (chunks, 16, 16, 4)), zeros past Kd and past count.
  static void pack_tile(const Call& c, int64_t e, int64_t col, int64_t count, int64_t chunks, int8_t* dst) {
    const int8_t* w = c.in.rhs + e * c.Kd * c.N + col;  // (Kd, N), from column col
    for (int64_t k = 0; k < chunks * kDepth; k += kQuad) {
      int8_t* d = dst + k * kTileCols;  // quad row k / 4: 16 columns x 4
      if (count == kTileCols && k + kQuad <= c.Kd) {
        interleave_quads(w + k * c.N, c.N, d);
        continue;
      }
      for (int64_t n = 0; n < kTileCols; ++n)
        for (int64_t i = 0; i < kQuad; ++i)
          d[kQuad * n + i] = n < count && k + i < c.Kd ? w[(k + i) * c.N + n] : int8_t(0);
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
#pragma omp parallel
    {
      if (!c.accumulate) {
#pragma omp for schedule(static) nowait
        for (int64_t e = 0; e < E; ++e)
          gemm_detail::zero_padding_rows(c.out, c.out_dtype, gemm_detail::group_rows(c.groups, e), c.N);
      }
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const int64_t begin = items.range_begin(t, threads), end = items.range_begin(t + 1, threads);
      if (begin < end) run_items(c, items, begin, end, chunks);  // Kd = 0: zero tiles, stored
    }
  }

  // Items [begin, end) of the work list, on this thread.
  static void run_items(const Call& c, const typename Parts::Items& items, int64_t begin, int64_t end,
                        int64_t chunks) {
    const int64_t depth = chunks * kDepth;
    std::vector<int8_t> panel(size_t(kItemTiles * chunks * kTileBytes));  // (4, chunks, 16, 16, 4)
    std::vector<int8_t> staged(size_t(kBlockRows * depth));               // (32, depth)
    alignas(64) int32_t acc[kBlockRows * 2 * kTileCols];                  // (32, 32)
    int64_t e = items.expert_of(begin);
    int64_t packed_e = -1, packed_cb = -1;
    Tiles::configure();
    for (int64_t i = begin; i < end; ++i) {
      while (i >= items.first[size_t(e + 1)]) ++e;
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t row_blocks = items.row_blocks(e);
      const int64_t local = i - items.first[size_t(e)], cb = local / row_blocks, rb = local % row_blocks;
      int64_t cols[kItemTiles];  // each tile's valid columns
      for (int64_t t = 0; t < kItemTiles; ++t) {
        const int64_t col = cb * kItemCols + t * kTileCols;
        cols[t] = std::clamp<int64_t>(c.N - col, 0, kTileCols);
        if (e != packed_e || cb != packed_cb)
          pack_tile(c, e, col, cols[t], chunks, panel.data() + t * chunks * kTileBytes);
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
        Parts::template multiply<TileDot::s8>(a, ld, n, b, b + chunks * kTileBytes, chunks, acc);
        epilogue(c, acc, e, r0, n, cb, s);
      }
    }
    Tiles::release();
  }
};

}  // namespace moe::amx

// Defines moe/gemm.h's nn_s8 (gemm_variants.h's MOE_DECLARE_GEMM_NN_S8) in the enclosing namespace on
// AmxS8Gemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)                                                      \
  void grouped_gemm_nn_s8(const GemmThresholds&, void* out, Dtype out_dtype, Int8Operands in, \
                          GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {      \
    ::moe::amx::AmxS8Gemm<Tiles>::nn_s8(out, out_dtype, in, groups, Kd, N, accumulate);       \
  }
