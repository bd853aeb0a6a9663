// The amx variant's grouped GEMM (nn, nn_swiglu with SwiGLU and the row weight in its epilogue, nt, tn),
// written once against a tile layer (cpu/gemm/amx/amx_tiles.h documents it): the hardware's AMX tiles
// (src/cpu/gemm/amx/gemm_amx.cpp, included there after the AMX target pragma) or their plain C++ emulation
// (src/cpu/gemm/portable/gemm_amx_emulated.cpp, the tests' instance). Everything here is a member of the
// class template, so the two instances share no function (each is compiled for its own ISA).
//
// bf16 inputs, float32 sums in the accumulator tiles, the output rounded once (bf16: nearest even).
// Work list: items (expert, column block, row block of 32 rows), expert-major and row blocks innermost,
// (tn: the row blocks are the weight gradient's K rows, for every expert, and the reduction is the
// group's live rows: lhs^T staged per row block, dout's rows packed as the B tiles, column blocks
// innermost),
// cut into one contiguous range per thread: every item is the same work (a small expert has few items,
// not a slow one), so no thread waits on another's expert. An item is two register blocks of 32 rows x
// 32 columns (four accumulator tiles fed by two A and two B tiles); its epilogues run during the next item's
// products (Parts::multiply_overlapped), a few rows after each chunk.
// Weights are packed inside the call (forward_backward changes them every step): a thread packs the
// four B tiles of its item's column block (K x 64 columns, or 32 gate and the same 32 up columns for
// SwiGLU) when its item's (expert, column block) changes, then its row blocks of that expert reuse them.
// Weights kept across calls (nn and nn_swiglu with ExpertWeights::packs: a forward run's) are packed once,
// every (expert, column block)'s four B tiles in the order items read them, and later calls read that
// packing: at few rows an expert, packing per call read and wrote every weight for a few rows' products.
// nn reads the weights (K, N) with rows along the reduction, nt (N, K) transposed: there a B tile's pair
// (k, k + 1) of a column is two neighbours of one weight row.
// Packed layout, per B tile: chunks of 32 reduction elements, each 16 pair rows x 16 columns x 2 (the
// (K/2, N, 2) layout TDPBF16PS reads), the reduction padded with zeros to a multiple of 32 and columns
// past the weights' with zero columns. A rows are loaded where they lie when a block has 32 live rows
// and K is a multiple of 32; else they are staged in a zero-padded block (the rows past a group's live
// rows and the reduction past K must read as zeros: the padding may hold anything).
#pragma once

#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/amx/amx_kernel_parts.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/work_shares.h"
#include "cpu/ops/vec_math.h"
#include "moe/dtype.h"

namespace moe::amx {

template <class Tiles>
struct AmxGemm {
  using Parts = AmxKernelParts<Tiles>;
  static constexpr int64_t kDepth = 32;               // reduction elements of an A tile row (64 bytes)
  static constexpr int64_t kTileCols = 16;            // columns of a B tile and an accumulator
  static constexpr int64_t kTileElems = 16 * kDepth;  // bf16 of one A or B tile
  static constexpr int64_t kBlockRows = 32;           // rows of a register block: two A tiles
  static constexpr int64_t kItemTiles = 4;            // B tiles of an item: two register blocks of two

  struct Call {
    void* out;          // nn: (rows, N); nn_swiglu: h (rows, N = 2M)
    Dtype out_dtype;    // f32 or bf16
    const bf16_t* lhs;  // (rows, K): nn's lhs, nt's dout
    ExpertWeights rhs;  // nn: (E, K, N), or two parts (E, K, N/2); nt: (E, N, K), or two parts (E, N, K/2)
    GroupedShape groups;
    int64_t K, N;  // the reduction (nn's Kd, nt's N) and out's columns (nn's N, nt's Kd)
    bool swiglu = false;
    void* g = nullptr;                  // nn_swiglu: (rows, M) in out_dtype
    const float* row_weight = nullptr;  // nn_swiglu: (rows) or nullptr
    bool keep_h = true;
    bool transposed = false;  // nt: rhs[e] is (N, K), parts split the reduction
    bool accumulate = false;  // nt: out's live rows += the product (float32 out)
    bool stream = false;      // nn, tn: out's whole 64-byte lines leave with non-temporal stores
    // tn: out = drhs (E, K, N), group e's (K, N) = lhs_e^T (K, live_e) @ dout_e (live_e, N): the item's
    // rows are K's (every expert, an empty one's sums zeros), the reduction is the group's live rows.
    bool tn = false;
    const bf16_t* dout = nullptr;  // tn: (rows, N) of (rows, ld_dout)
    int64_t ld_dout = 0;
  };

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

  // An item's output columns: 64 of out (nn), or 32 of g (nn_swiglu: 32 gate and 32 up columns of h).
  static int64_t item_cols(const Call& c) { return c.swiglu ? 2 * kTileCols : 4 * kTileCols; }
  static int64_t out_cols(const Call& c) { return c.swiglu ? c.N / 2 : c.N; }
  // Expert e's output rows (row blocks) and reduction length.
  static int64_t item_rows(const Call& c, int64_t e) {
    return c.tn ? c.K : gemm_detail::group_rows(c.groups, e).live;
  }
  static int64_t reduction(const Call& c, int64_t e) {
    return c.tn ? gemm_detail::group_rows(c.groups, e).live : c.K;
  }

  // The weight columns B tile t of column block cb holds: [col, col + count), count <= 16 (0: none).
  // nn: four consecutive tiles; nn_swiglu: gate, up, gate, up, each pair the same 16 columns of g.
  static void tile_columns(const Call& c, int64_t cb, int64_t t, int64_t& col, int64_t& count) {
    if (!c.swiglu) {
      col = cb * 4 * kTileCols + t * kTileCols;
      count = std::clamp<int64_t>(c.N - col, 0, kTileCols);
      return;
    }
    const int64_t M = c.N / 2, j0 = cb * 2 * kTileCols + t / 2 * kTileCols;
    col = (t % 2) * M + j0;
    count = std::clamp<int64_t>(M - j0, 0, kTileCols);
  }

  // Packs weight columns [col, col + count) of expert e into one B tile per 32 reduction elements
  // (dst: (chunks, 16, 16, 2)), zeros past K and past count.
  static void pack_tile(const Call& c, int64_t e, int64_t col, int64_t count, int64_t chunks, bf16_t* dst) {
    if (c.transposed) return pack_tile_transposed(c, e, col, count, chunks, dst);
    // The source (Kd, parts x part_cols), rows ld apart: nn's weights, or tn's dout rows of group e.
    const bf16_t* parts[2];
    int64_t Kd, part_cols, ld;
    if (c.tn) {
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      parts[0] = c.dout + g.row0 * c.ld_dout;
      Kd = g.live;
      part_cols = c.N;
      ld = c.ld_dout;
    } else {
      Kd = c.K;
      part_cols = ld = c.N / c.rhs.parts();
      for (int p = 0; p < c.rhs.parts(); ++p)
        parts[p] = static_cast<const bf16_t*>(c.rhs.part(p)) + e * Kd * part_cols;
    }
    auto column = [&](int64_t n) {  // column n's element of row 0
      const int64_t p = n / part_cols;
      return parts[p] + (n - p * part_cols);
    };
    // 16 columns of one part are 16 consecutive elements of each row (the fast path); a tile across the
    // parts' boundary (part_cols not a multiple of 16) or a ragged last one goes column by column.
    const bool contiguous = count == kTileCols && col / part_cols == (col + kTileCols - 1) / part_cols;
    const bf16_t* base = count > 0 ? column(col) : nullptr;
    for (int64_t k = 0; k < chunks * kDepth; k += 2) {
      bf16_t* d = dst + k * kTileCols;  // pair row k / 2: 16 columns x 2
      if (contiguous && k + 1 < Kd) {
        interleave_pairs(base + k * ld, base + (k + 1) * ld, d);
        continue;
      }
      if (k >= Kd || count == 0) {  // the reduction's padding (tn at few rows: most of a chunk), or no column
        std::fill(d, d + 2 * kTileCols, bf16_t(0));
        continue;
      }
      for (int64_t n = 0; n < kTileCols; ++n) {
        const bf16_t* src = n < count ? column(col + n) : nullptr;
        d[2 * n] = src && k < Kd ? src[k * ld] : bf16_t(0);
        d[2 * n + 1] = src && k + 1 < Kd ? src[(k + 1) * ld] : bf16_t(0);
      }
    }
  }

  // d (16 columns x 2) = the 16 elements of rows r0 and r1, column by column: SSE2 (every x86-64 CPU, so
  // the emulated instance runs it too) word interleaves.
  static void interleave_pairs(const bf16_t* r0, const bf16_t* r1, bf16_t* d) {
    for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 8 * h));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + 8 * h));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16 * h), _mm_unpacklo_epi16(a, b));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16 * h + 8), _mm_unpackhi_epi16(a, b));
    }
  }

  // pack_tile for nt's weights (N, K) per part (N, K / parts): element (k, col) is row col, column k.
  static void pack_tile_transposed(const Call& c, int64_t e, int64_t col, int64_t count, int64_t chunks,
                                   bf16_t* dst) {
    const int64_t K = c.K, part_k = K / c.rhs.parts();
    auto element = [&](int64_t k, int64_t n) {  // zero past K and past count
      if (k >= K || n >= count) return bf16_t(0);
      const int64_t p = k / part_k;
      return static_cast<const bf16_t*>(c.rhs.part(int(p)))[(e * c.N + col + n) * part_k + k - p * part_k];
    };
    for (int64_t k = 0; k < chunks * kDepth; k += 2) {
      bf16_t* d = dst + k * kTileCols;  // pair row k / 2: 16 columns x 2
      const int64_t p = k / part_k;
#if defined(MOE_VEC_AVX512BF16)
      if (k % kDepth == 0 && count == kTileCols && k + kDepth <= K && (k + kDepth - 1) / part_k == p) {
        transpose_chunk(
            static_cast<const bf16_t*>(c.rhs.part(int(p))) + (e * c.N + col) * part_k + k - p * part_k,
            part_k, d);
        k += kDepth - 2;
        continue;
      }
#endif
      if (count == kTileCols && k + 1 < K && (k + 1) / part_k == p) {
        // The pair is two neighbours of each of 16 weight rows: one 32-bit copy per column.
        const bf16_t* w =
            static_cast<const bf16_t*>(c.rhs.part(int(p))) + (e * c.N + col) * part_k + k - p * part_k;
        for (int64_t n = 0; n < kTileCols; ++n) std::memcpy(d + 2 * n, w + n * part_k, 2 * sizeof(bf16_t));
        continue;
      }
      for (int64_t n = 0; n < kTileCols; ++n) {
        d[2 * n] = element(k, n);
        d[2 * n + 1] = element(k + 1, n);
      }
    }
  }

#if defined(MOE_VEC_AVX512BF16)
  // The 128-bit lanes of a and b that _mm512_shuffle_i32x4's imm picks: lanes 0, 1 of each (kLo), 2, 3 (kHi),
  // the even lanes of each (kEven), the odd (kOdd).
  static constexpr int kLo = 0x44, kHi = 0xEE, kEven = 0x88, kOdd = 0xDD;
  template <int Imm>
  static __m512i lanes(__m512i a, __m512i b) {
    return _mm512_maskz_shuffle_i32x4(__mmask16(0xffff), a, b, Imm);
  }
  // One whole chunk of pack_tile_transposed: the 32 reduction elements of 16 weight rows (w, ld apart) are 16
  // pairs of each, so the B tile's pair rows are the transpose of a 16 x 16 matrix of 32-bit pairs; in
  // registers, where a 32-bit copy a column made packing most of nt's time (0.26-0.37 of a read at 64 rows).
  static void transpose_chunk(const bf16_t* w, int64_t ld, bf16_t* d) {
    // The masked forms: GCC 12 warns of the plain ones' undefined pass-through (-Wuninitialized).
    constexpr __mmask16 kAll = 0xffff;
    __m512i r[16], t[16];
    for (int n = 0; n < 16; ++n) r[n] = _mm512_loadu_si512(w + n * ld);
    for (int n = 0; n < 16; n += 2) {  // per 128-bit lane: pairs 0, 1 (lo) or 2, 3 (hi) of rows n, n + 1
      t[n] = _mm512_maskz_unpacklo_epi32(kAll, r[n], r[n + 1]);
      t[n + 1] = _mm512_maskz_unpackhi_epi32(kAll, r[n], r[n + 1]);
    }
    for (int g = 0; g < 16; g += 4)  // r[g + j], lane L: pair 4L + j of rows g .. g + 3
      for (int h = 0; h < 2; ++h) {
        r[g + 2 * h] = _mm512_maskz_unpacklo_epi64(__mmask8(0xff), t[g + h], t[g + 2 + h]);
        r[g + 2 * h + 1] = _mm512_maskz_unpackhi_epi64(__mmask8(0xff), t[g + h], t[g + 2 + h]);
      }
    for (int j = 0; j < 4; ++j) {  // pair p = 4L + j: lane L of r[j], r[4 + j], r[8 + j], r[12 + j]
      const __m512i x0 = lanes<kLo>(r[j], r[4 + j]), x1 = lanes<kHi>(r[j], r[4 + j]);
      const __m512i y0 = lanes<kLo>(r[8 + j], r[12 + j]), y1 = lanes<kHi>(r[8 + j], r[12 + j]);
      _mm512_storeu_si512(d + (0 + j) * 2 * kTileCols, lanes<kEven>(x0, y0));
      _mm512_storeu_si512(d + (4 + j) * 2 * kTileCols, lanes<kOdd>(x0, y0));
      _mm512_storeu_si512(d + (8 + j) * 2 * kTileCols, lanes<kEven>(x1, y1));
      _mm512_storeu_si512(d + (12 + j) * 2 * kTileCols, lanes<kOdd>(x1, y1));
    }
  }
#endif

  // Rows [0, n) of a (n, Kd) block -> (32, chunks * 32), zeros past n and Kd; of 16 rows when n <= 16 (the
  // block's second A tile is then not loaded).
  static void stage_rows(const bf16_t* src, int64_t n, int64_t Kd, int64_t depth, bf16_t* dst) {
    for (int64_t r = 0; r < (n > 16 ? kBlockRows : 16); ++r) {
      bf16_t* d = dst + r * depth;
      const int64_t have = r < n ? Kd : 0;
      if (have > 0) std::copy(src + r * Kd, src + r * Kd + have, d);
      std::fill(d + have, d + depth, bf16_t(0));
    }
  }

  // tn's A: rows [0, n) of lhs^T, i.e. columns of src (live, ld) -> (32, depth), zeros past n and live.
  static void stage_transposed(const bf16_t* src, int64_t live, int64_t n, int64_t ld, int64_t depth,
                               bf16_t* dst) {
    std::fill(dst, dst + kBlockRows * depth, bf16_t(0));
    for (int64_t r = 0; r < live; ++r)
      for (int64_t i = 0; i < n; ++i) dst[i * depth + r] = src[r * ld + i];
  }

  // dst[i] (dt: float32 or bf16, added into float32 where accumulating) = src[i], for i < n: vector
  // conversions a row at a time (the AMX instance's are AVX-512's), not a dtype branch an element; at 32 rows
  // an expert and Kd 768-2048 those took about as long as the tiles' products. stream: a whole register
  // block's row (n = 32) on a 64-byte line goes out with non-temporal stores (AVX-512 BF16 instances).
  static void store_row(void* dst, Dtype dt, const float* src, int64_t n, bool accumulate = false,
                        bool stream = false) {
#if defined(MOE_VEC_AVX512BF16)
    if (stream && !accumulate && n == 2 * kTileCols && (reinterpret_cast<uintptr_t>(dst) & 63) == 0)
      return Parts::stream_line(dst, dt, _mm512_loadu_ps(src), _mm512_loadu_ps(src + kTileCols));
#endif
    if (accumulate) {
      float* d = static_cast<float*>(dst);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] += src[i];
    } else if (dt == Dtype::bf16) {
      cpu::f32_to_bf16_row(static_cast<bf16_t*>(dst), src, n);
    } else {
      std::memcpy(dst, src, size_t(n) * sizeof(float));
    }
  }

  // dst[i] = src[i] as a tensor of dt stores it (bf16: rounded), for i < n <= 16.
  static void stored_row(const float* src, Dtype dt, int64_t n, float* dst) {
    if (dt == Dtype::bf16) {
      bf16_t rounded[kTileCols];
      cpu::f32_to_bf16_row(rounded, src, n);
      cpu::bf16_to_f32_row(dst, rounded, n);
    } else {
      std::memcpy(dst, src, size_t(n) * sizeof(float));
    }
  }

  // Rows [from, to) of register block s of an item: acc (n, 32) to rows [r0, r0 + n) of the output, from
  // column block cb. nn: out's columns cb * 64 + s * 32 + [0, 32); nn_swiglu: acc's columns 0-15 are gate,
  // 16-31 up of g's columns j0 + [0, 16), h and g computed from h's values as stored (as swiglu_forward
  // does); g into g_stage's columns s * 16 + [0, 16) where given (streams_g), else in place.
  static void epilogue(const Call& c, const float* acc, int64_t r0, int64_t from, int64_t to, int64_t cb,
                       int64_t s, char* g_stage) {
    const Dtype dt = c.out_dtype;
    const int64_t size = dtype_size(dt);
    if (!c.swiglu) {
      const int64_t c0 = cb * 4 * kTileCols + s * 2 * kTileCols,
                    cols = std::min<int64_t>(2 * kTileCols, c.N - c0);
      for (int64_t r = from; r < to; ++r)
        store_row(static_cast<char*>(c.out) + ((r0 + r) * c.N + c0) * size, dt, acc + r * 2 * kTileCols, cols,
                  c.accumulate, c.stream);
      return;
    }
    const int64_t M = c.N / 2, j0 = cb * 2 * kTileCols + s * kTileCols, cols = std::min(kTileCols, M - j0);
    for (int64_t r = from; r < to; ++r) {
      const int64_t row = r0 + r;
      char* h_row = static_cast<char*>(c.out) + row * c.N * size;
      char* g_row = g_stage ? g_stage + (r * 2 + s) * kTileCols * size
                            : static_cast<char*>(c.g) + (row * M + j0) * size;
      swiglu_row(acc + r * 2 * kTileCols, dt, c.row_weight ? c.row_weight[row] : 1.0f, cols,
                 c.keep_h ? h_row + j0 * size : nullptr, h_row + (M + j0) * size, g_row);
    }
  }

  // Whether an nn_swiglu item's g leaves through a stage (its 32 columns of each row, a 64-byte line of bf16
  // or two of float32, written by its two register blocks' epilogues) and then stream_g: g is large
  // (Call::stream) and the item's 32 columns are whole lines. Stored in place, a line's two halves were each
  // read from memory before being written.
  static bool streams_g(const Call& c, const int64_t (&cols)[kItemTiles]) {
    const int64_t line_elems = 64 / dtype_size(c.out_dtype), M = c.N / 2;
    return c.swiglu && c.stream && cols[2] == kTileCols && M % line_elems == 0 &&
           (reinterpret_cast<uintptr_t>(c.g) & 63) == 0;
  }

  // Rows [from, to) of g_stage (n, 32) in out_dtype -> g's rows r0 + [from, to), columns cb * 32 + [0, 32):
  // non-temporal where the instance has AVX-512 BF16.
  static void stream_g(const Call& c, const char* g_stage, int64_t r0, int64_t from, int64_t to, int64_t cb) {
    const int64_t size = dtype_size(c.out_dtype), row_bytes = 2 * kTileCols * size;
    for (int64_t r = from; r < to; ++r) {
      char* dst = static_cast<char*>(c.g) + ((r0 + r) * (c.N / 2) + cb * 2 * kTileCols) * size;
#if defined(MOE_VEC_AVX512BF16)
      for (int64_t b = 0; b < row_bytes; b += 64)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + b),
                            _mm512_load_si512(g_stage + r * row_bytes + b));
#else
      std::memcpy(dst, g_stage + r * row_bytes, size_t(row_bytes));
#endif
    }
  }

  // One row of a SwiGLU register block: gate_up's 16 gate and 16 up sums -> h's gate and up columns (where
  // h_gate is not null) and g's = silu(gate) * up * w, `cols` <= 16 of each, in dt; g from h's values as
  // stored (bf16: rounded), as swiglu_forward computes it.
#if defined(MOE_VEC_AVX512BF16)
  // In vectors where the instance is compiled for AVX-512 BF16 (the hardware one always): the portable loop's
  // conversions and sigmoid took ~10 ms of a 44 ms up projection at T 512 (Qwen3-30B-A3B, AMX Xeon, 2
  // threads).
  static void swiglu_row(const float* gate_up, Dtype dt, float w, int64_t cols, char* h_gate, char* h_up,
                         char* g) {
    const __mmask16 mask = Parts::first_lanes(cols);
    __m512 gate = _mm512_loadu_ps(gate_up), up = _mm512_loadu_ps(gate_up + kTileCols);
    if (dt == Dtype::bf16) {
      const __m256i gate_bf16 = Parts::bf16_words(gate), up_bf16 = Parts::bf16_words(up);
      gate = cpu::bf16_to_f32(gate_bf16);
      up = cpu::bf16_to_f32(up_bf16);
      if (h_gate) {
        _mm256_mask_storeu_epi16(h_gate, mask, gate_bf16);
        _mm256_mask_storeu_epi16(h_up, mask, up_bf16);
      }
    } else if (h_gate) {
      _mm512_mask_storeu_ps(h_gate, mask, gate);
      _mm512_mask_storeu_ps(h_up, mask, up);
    }
    const __m512 out =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gate, cpu::sigmoid16(gate)), up), _mm512_set1_ps(w));
    Parts::store16(g, dt, out, mask);
  }
#else
  static void swiglu_row(const float* gate_up, Dtype dt, float w, int64_t cols, char* h_gate, char* h_up,
                         char* g) {
    alignas(64) float gate[kTileCols], up[kTileCols], out[kTileCols];
    stored_row(gate_up, dt, cols, gate);
    stored_row(gate_up + kTileCols, dt, cols, up);
    if (h_gate) {
      store_row(h_gate, dt, gate, cols);
      store_row(h_up, dt, up, cols);
    }
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) out[j] = gate[j] * cpu::sigmoid_approx(gate[j]) * up[j] * w;
    store_row(g, dt, out, cols);
  }
#endif

  // The bytes of an output of `cols` columns over the groups' rows.
  static int64_t out_bytes(const GroupedShape& groups, int64_t cols, Dtype dt) {
    const int64_t rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
    return rows * cols * int64_t(dtype_size(dt));
  }

  // cpu/gemm/gemm.h's nn and nn_swiglu (bf16 inputs: supports() refuses the others).
  // stream_bytes: outputs (nn's out, nn_swiglu's g) of this many bytes or more stream
  // (GemmThresholds::amx_stream_bytes).
  static void nn(void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                 GroupedShape groups, int64_t Kd, int64_t N, int64_t stream_bytes) {
    MOE_CHECK(in_dtype == Dtype::bf16, "the amx kernel takes bfloat16 inputs");
    gemm_detail::check_groups(groups, Kd, N);
    Call c{out, out_dtype, static_cast<const bf16_t*>(lhs), rhs, groups, Kd, N};
    c.stream = out_bytes(groups, N, out_dtype) >= stream_bytes;
    run(c);
  }
  static void nt(void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
                 GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
    MOE_CHECK(in_dtype == Dtype::bf16, "the amx kernel takes bfloat16 inputs");
    MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "nt accumulates into a float32 out only");
    gemm_detail::check_groups(groups, Kd, N);
    Call c{out, out_dtype, static_cast<const bf16_t*>(dout), rhs, groups, N, Kd};
    c.transposed = true;
    c.accumulate = accumulate;
    run(c);
  }
  static void tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
                 GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout, int64_t stream_bytes) {
    MOE_CHECK(in_dtype == Dtype::bf16, "the amx kernel takes bfloat16 inputs");
    MOE_CHECK(ld_dout >= N, "tn: dout's rows are ld_dout >= N apart");
    gemm_detail::check_groups(groups, Kd, N);
    Call c{drhs, out_dtype, static_cast<const bf16_t*>(lhs), ExpertWeights(nullptr), groups, Kd, N};
    c.tn = true;
    c.dout = static_cast<const bf16_t*>(dout);
    c.ld_dout = ld_dout;
    c.stream = groups.experts * Kd * N * int64_t(dtype_size(out_dtype)) >= stream_bytes;
    run(c);
  }
  static void nn_swiglu(void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                        GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight, bool keep_h,
                        int64_t stream_bytes) {
    MOE_CHECK(in_dtype == Dtype::bf16, "the amx kernel takes bfloat16 inputs");
    gemm_detail::check_groups(groups, Kd, 2 * M);
    Call c{h,          out_dtype, static_cast<const bf16_t*>(lhs), rhs, groups, Kd, 2 * M, true, g,
           row_weight, keep_h};
    c.stream = out_bytes(groups, M, out_dtype) >= stream_bytes;
    run(c);
  }

  static void run(const Call& c) {
    const GroupedShape& groups = c.groups;
    const int64_t E = groups.experts;
    const typename Parts::Items items(E, ceil_div(out_cols(c), item_cols(c)),
                                      [&](int64_t e) { return ceil_div(item_rows(c, e), kBlockRows); });
    int64_t max_chunks = 0;  // the longest reduction's, for the buffers
    for (int64_t e = 0; e < E; ++e) max_chunks = std::max(max_chunks, ceil_div(reduction(c, e), kDepth));
    const bf16_t* kept = c.rhs.packs && !c.transposed && !c.tn ? kept_panels(c, items.col_blocks) : nullptr;
    gemm_detail::WorkShares shares(items.first.back(), omp_get_max_threads());
#pragma omp parallel
    {
      if (!c.tn) {  // tn's output has no padding rows
#pragma omp for schedule(static) nowait
        for (int64_t e = 0; e < E; ++e) {
          const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
          gemm_detail::zero_padding_rows(c.out, c.out_dtype, g, c.N);  // accumulate or not, as ref
          if (c.swiglu) gemm_detail::zero_padding_rows(c.g, c.out_dtype, g, c.N / 2);
        }
      }
      const int t = omp_get_thread_num();
      run_items(c, items, shares, t, max_chunks, kept);
    }
  }

  // nn's and nn_swiglu's kept weights (c.rhs.packs) as (E, col_blocks, 4, chunks, 16, 16, 2): each item's
  // panel, packed on the first call with these packs.
  static const bf16_t* kept_panels(const Call& c, int64_t col_blocks) {
    const std::string layout = c.swiglu ? "amx bf16 B tiles, gate and up" : "amx bf16 B tiles";
    const int64_t E = c.groups.experts, chunks = ceil_div(c.K, kDepth);
    if (const uint8_t* found = c.rhs.packs->find(layout, c.rhs.first, E, c.K, c.N))
      return reinterpret_cast<const bf16_t*>(found);
    const int64_t panel_elems = kItemTiles * chunks * kTileElems;
    auto* dst = reinterpret_cast<bf16_t*>(
        c.rhs.packs->make(layout, c.rhs.first, E, c.K, c.N, size_t(E * col_blocks * panel_elems) * 2));
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < E * col_blocks; ++i)
      pack_item(c, i / col_blocks, i % col_blocks, chunks, dst + i * panel_elems);
    return dst;
  }

  // The four B tiles of expert e's column block cb (dst: (4, chunks, 16, 16, 2)).
  static void pack_item(const Call& c, int64_t e, int64_t cb, int64_t chunks, bf16_t* dst) {
    for (int64_t t = 0; t < kItemTiles; ++t) {
      int64_t col, count;
      tile_columns(c, cb, t, col, count);
      pack_tile(c, e, col, count, chunks, dst + t * chunks * kTileElems);
    }
  }

  // Items a thread takes from its share at once (WorkShares::next_run).
  static constexpr int64_t kItemsTaken = 8;

  // How many column blocks of an expert a thread packs at once (a group: its items then read one packing),
  // up to 1 MiB of B tiles, in L2. tn's dout rows (few rows an expert: the whole expert's fit) were packed
  // once per row block of K, and that took longer than the products. nn's weights packed per call
  // (forward_backward's) are read a row pair at a time across the group's columns (pack_rows): packed per
  // item, a pack read 128 bytes of each weight row, 4 KiB or more apart, and DRAM pages held it to 0.15-0.21
  // of a read. nt's, per item.
  static constexpr int64_t kGroupBytes = int64_t(1) << 20;
  static int64_t group_blocks(const Call& c, int64_t col_blocks, int64_t max_chunks) {
    if (c.transposed) return 1;
    const int64_t block_bytes = kItemTiles * max_chunks * kTileElems * int64_t(sizeof(bf16_t));
    if (c.tn) return block_bytes * col_blocks <= kGroupBytes ? col_blocks : 1;
    return std::clamp<int64_t>(kGroupBytes / std::max<int64_t>(block_bytes, 1), 1,
                               std::max<int64_t>(col_blocks, 1));
  }

  // nn's B tiles of expert e's column blocks [cb0, cb1) into panel ((cb1 - cb0), 4, chunks, 16, 16, 2),
  // reading the weights a row pair at a time across those columns (the rows four ahead prefetched); tiles
  // not whole in one part (a ragged last one) by pack_tile, and the pair rows past the last whole pair
  // (odd K, the reduction's padding) a column at a time.
  static void pack_rows(const Call& c, int64_t e, int64_t cb0, int64_t cb1, int64_t chunks, bf16_t* panel) {
    constexpr int64_t kRowsAhead = 4;
    const int64_t tiles = (cb1 - cb0) * kItemTiles, tile_elems = chunks * kTileElems,
                  ld = c.N / c.rhs.parts();
    const int64_t pairs_end = c.K & ~int64_t(1);  // the rows read as pairs
    constexpr int64_t kMaxTiles = kGroupBytes / (kTileElems * int64_t(sizeof(bf16_t)));  // one chunk each
    MOE_CHECK(tiles <= kMaxTiles, "an amx column group of at most kGroupBytes");
    const bf16_t* first_row[kMaxTiles];  // a whole tile's columns in row 0, or nullptr
    for (int64_t i = 0; i < tiles; ++i) {
      int64_t col, count;
      tile_columns(c, cb0 + i / kItemTiles, i % kItemTiles, col, count);
      const int64_t p = col / ld;
      first_row[i] = nullptr;
      if (count == kTileCols && (col + kTileCols - 1) / ld == p)
        first_row[i] = static_cast<const bf16_t*>(c.rhs.part(int(p))) + e * c.K * ld + (col - p * ld);
      else
        pack_tile(c, e, col, count, chunks, panel + i * tile_elems);
    }
    for (int64_t k = 0; k < pairs_end; k += 2)
      for (int64_t i = 0; i < tiles; ++i)
        if (const bf16_t* row = first_row[i]) {
          if ((reinterpret_cast<uintptr_t>(row + k * ld) & 63) == 0) {  // once a line
            _mm_prefetch(reinterpret_cast<const char*>(row + (k + kRowsAhead) * ld), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(row + (k + kRowsAhead + 1) * ld), _MM_HINT_T0);
          }
          interleave_pairs(row + k * ld, row + (k + 1) * ld, panel + i * tile_elems + k * kTileCols);
        }
    for (int64_t i = 0; i < tiles; ++i)
      if (first_row[i])
        for (int64_t k = pairs_end; k < chunks * kDepth; k += 2) {
          bf16_t* d = panel + i * tile_elems + k * kTileCols;
          for (int64_t n = 0; n < kTileCols; ++n) {
            d[2 * n] = k < c.K ? first_row[i][k * ld + n] : bf16_t(0);
            d[2 * n + 1] = bf16_t(0);
          }
        }
  }

  // Item (e, cb)'s B tiles: its group's (group_blocks) packed into panel unless the last call packed them
  // (packed_e, packed_group: what panel holds).
  static const bf16_t* packed_item(const Call& c, int64_t e, int64_t cb, int64_t chunks, int64_t col_blocks,
                                   int64_t group, bf16_t* panel, int64_t& packed_e, int64_t& packed_group) {
    const int64_t panel_elems = kItemTiles * chunks * kTileElems, cb0 = cb / group * group;
    if (e != packed_e || cb0 != packed_group) {
      const int64_t cb1 = std::min(col_blocks, cb0 + group);
      if (c.tn || c.transposed)
        for (int64_t b = cb0; b < cb1; ++b) pack_item(c, e, b, chunks, panel + (b - cb0) * panel_elems);
      else
        pack_rows(c, e, cb0, cb1, chunks, panel);
    }
    packed_e = e;
    packed_group = cb0;
    return panel + (cb - cb0) * panel_elems;
  }

  // An item whose sums wait for their epilogues: its register blocks' acc (n, 32 each) for rows
  // [r0, r0 + n) of the output from column block cb, and g's stage where streams_g.
  struct PendingItem {
    const float* acc[2] = {};
    int64_t r0 = 0, n = 0, cb = 0, blocks = 0;
    char* g_stage = nullptr;

    // Its epilogue in units of a row: each block's n rows, then the stage's n rows to g.
    int64_t units() const { return n * (blocks + (g_stage ? 1 : 0)); }
  };

  // Units [from, to) of p's epilogue.
  static void epilogue_units(const Call& c, const PendingItem& p, int64_t from, int64_t to) {
    for (int64_t u = from; u < to;) {
      const int64_t part = u / p.n, r = u % p.n, end = std::min(to, (part + 1) * p.n);
      if (part < p.blocks)
        epilogue(c, p.acc[part], p.r0, r, r + end - u, p.cb, part, p.g_stage);
      else
        stream_g(c, p.g_stage, p.r0, r, r + end - u, p.cb);
      u = end;
    }
  }

  // Thread t's items of the work list (its contiguous share, then those others left: WorkShares); kept: the
  // weights' panels (kept_panels), or nullptr (packed here).
  static void run_items(const Call& c, const typename Parts::Items& items, gemm_detail::WorkShares& shares,
                        int t, int64_t max_chunks, const bf16_t* kept) {
    const int64_t group = group_blocks(c, items.col_blocks, max_chunks);
    Buffer<bf16_t> panel;  // (group, 4, chunks, 16, 16, 2): uninitialised, a cached block
    if (!kept) panel = Buffer<bf16_t>(size_t(group * kItemTiles * max_chunks * kTileElems));
    std::vector<bf16_t> staged(size_t(kBlockRows * max_chunks * kDepth));  // (32, depth)
    // An item's and the item before's: (2, 32, 32) sums, g's (32, 32).
    alignas(64) float acc[2][2][kBlockRows * 2 * kTileCols];
    alignas(64) char g_stage[2][kBlockRows * 2 * kTileCols * sizeof(float)];
    PendingItem pending;  // its epilogues run during the next item's products, while the tile unit multiplies
    int slot = 0;
    const int64_t col_blocks = items.col_blocks;
    int64_t e = 0;
    int64_t packed_e = -1, packed_group = -1, staged_e = -1, staged_rb = -1;
    Tiles::configure();
    for (int64_t i = -1, end = -1;;) {
      if (++i >= end) {
        const gemm_detail::WorkShares::Run run = shares.next_run(t, kItemsTaken);
        if (run.begin < 0) break;
        i = run.begin;
        end = run.end;
      }
      if (i < items.first[size_t(e)] || i >= items.first[size_t(e + 1)]) e = items.expert_of(i);
      const gemm_detail::GroupRows g = gemm_detail::group_rows(c.groups, e);
      const int64_t chunks = ceil_div(reduction(c, e), kDepth), depth = chunks * kDepth;
      const int64_t row_blocks = items.row_blocks(e);
      // nn, nt: row blocks innermost (the packed B tiles serve the expert's row blocks in turn); tn: column
      // blocks innermost (lhs^T, staged element by element, serves them; dout's rows pack as whole lines).
      const int64_t local = i - items.first[size_t(e)];
      const int64_t cb = c.tn ? local % col_blocks : local / row_blocks,
                    rb = c.tn ? local / col_blocks : local % row_blocks;
      int64_t cols[kItemTiles];  // each tile's valid columns
      for (int64_t t = 0; t < kItemTiles; ++t) {
        int64_t col;
        tile_columns(c, cb, t, col, cols[t]);
      }
      const bf16_t* b_tiles =
          kept ? kept + (e * col_blocks + cb) * kItemTiles * chunks * kTileElems
               : packed_item(c, e, cb, chunks, col_blocks, group, panel.data(), packed_e, packed_group);
      // The block's rows: lhs's rows of the group (nn, nt) or lhs's columns (tn: rows of lhs^T).
      const int64_t n = std::min(kBlockRows, item_rows(c, e) - rb * kBlockRows);
      const int64_t r0 = (c.tn ? e * c.K : g.row0) + rb * kBlockRows;  // out's row
      const bf16_t* a = c.tn ? nullptr : c.lhs + r0 * c.K;
      int64_t ld = c.K;
      if (c.tn) {
        if (e != staged_e || rb != staged_rb)
          stage_transposed(c.lhs + g.row0 * c.K + rb * kBlockRows, g.live, n, c.K, depth, staged.data());
        staged_e = e;
        staged_rb = rb;
        a = staged.data();
        ld = depth;
      } else if (n < kBlockRows || depth != c.K) {
        // Items of one row block follow each other (kept weights at few rows: every column block's).
        if (e != staged_e || rb != staged_rb) stage_rows(a, n, c.K, depth, staged.data());
        staged_e = e;
        staged_rb = rb;
        a = staged.data();
        ld = depth;
      }
      // Both register blocks' products, the item before's epilogues spread over them.
      const int64_t blocks = cols[2] == 0 ? 1 : 2, units = pending.units();
      for (int64_t s = 0; s < blocks; ++s) {
        const bf16_t* b = b_tiles + 2 * s * chunks * kTileElems;
        const int64_t first = units * s / blocks, count = units * (s + 1) / blocks - first;
        Parts::template multiply_overlapped<TileDot::bf16>(
            a, ld * int64_t(sizeof(bf16_t)), n, b, b + chunks * kTileElems, chunks, kept != nullptr,
            acc[slot][s], count,
            [&](int64_t from, int64_t to) { epilogue_units(c, pending, first + from, first + to); });
      }
      pending = {
          {acc[slot][0], acc[slot][1]}, r0, n, cb, blocks, streams_g(c, cols) ? g_stage[slot] : nullptr};
      slot ^= 1;
    }
    epilogue_units(c, pending, 0, pending.units());
    Tiles::release();
    if (c.stream) _mm_sfence();  // the non-temporal stores, before the region's barrier
  }
};

}  // namespace moe::amx

// Defines cpu/gemm/gemm.h's nn, nn_swiglu, nt and tn (the signatures of gemm_variants.h's
// MOE_DECLARE_GEMM_FORMS_WITH_NN_SWIGLU) in the enclosing namespace on AmxGemm<Tiles>.
#define MOE_DEFINE_GEMM_AMX_FORMS(Tiles)                                                                     \
  void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs,                 \
                       ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {      \
    ::moe::amx::AmxGemm<Tiles>::nn(out, out_dtype, lhs, rhs, in_dtype, groups, Kd, N, k.amx_stream_bytes);   \
  }                                                                                                          \
  void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,   \
                              ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M, \
                              const float* row_weight, bool keep_h) {                                        \
    ::moe::amx::AmxGemm<Tiles>::nn_swiglu(h, g, out_dtype, lhs, rhs, in_dtype, groups, Kd, M, row_weight,    \
                                          keep_h, k.amx_stream_bytes);                                       \
  }                                                                                                          \
  void grouped_gemm_nt(const GemmThresholds&, void* out, Dtype out_dtype, const void* dout,                  \
                       ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,        \
                       bool accumulate) {                                                                    \
    ::moe::amx::AmxGemm<Tiles>::nt(out, out_dtype, dout, rhs, in_dtype, groups, Kd, N, accumulate);          \
  }                                                                                                          \
  void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs,                \
                       const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,         \
                       int64_t ld_dout) {                                                                    \
    ::moe::amx::AmxGemm<Tiles>::tn(drhs, out_dtype, lhs, dout, in_dtype, groups, Kd, N, ld_dout,             \
                                   k.amx_stream_bytes);                                                      \
  }
