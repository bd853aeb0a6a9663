// The gemv variant's zmm instance (cpu/gemm/gemm_gemv.cpp, cpu/gemm/gemm_gemv_kernel.h): pairs of weight rows
// (k, k + 1) interleaved in registers (vpunpck{l,h}wd, "lane order") and multiplied by each live row's bf16
// pair (vdpbf16ps), 12 rows x 32 columns a register block; products summed in float32, the output rounded
// once to nearest even (bf16) or stored as is; an odd reduction's last weight row pairs with zeros.
#include "cpu/gemm/gemm_gemv.h"
#include "cpu/gemm/gemm_variants.h"

// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as the unused merge operand,
// which -Wmaybe-uninitialized (and, for some, -Wuninitialized) reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

// Everything from here to pop_options is AVX-512 BF16 code, whatever the build's -march (docs/design.md,
// "ISA levels"); the headers above are the build ISA's.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,bmi,bmi2")

#define MOE_GEMV_NS moe::cpu::isa_avx512_bf16::gemv
#include "cpu/gemm/gemm_gemv_kernel.h"
#include "cpu/gemm/gemm_gemv_nt_kernel.h"
#include "cpu/gemm/gemm_gemv_tn_kernel.h"

namespace moe::cpu::isa_avx512_bf16::gemv {
namespace {

using Job = BlockJob<int32_t>;
constexpr int64_t kTileCols = kTileColsOfInstance;  // the zmm layer's (two vectors of pair sums a row)

// Lane order (unpack interleaves within 128-bit lanes) -> columns [16 half, 16 half + 16) in order.
inline __m512i columns_from_lanes(int half) {
  return half == 0 ? _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23)
                   : _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

// The first n of a tile's 32 columns.
inline __mmask32 first_cols(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << n) - 1);
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
[[gnu::always_inline]] inline void store_output(const SumVector (&acc)[R][2], const Job& j, const Tile& t,
                                                __mmask32 cols) {
  const __mmask16 lo = __mmask16(cols & 0xffffu), hi = __mmask16(cols >> 16);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 a0 = __m512(acc[r][0]), a1 = __m512(acc[r][1]);
    const __m512 c0 = _mm512_permutex2var_ps(a0, columns_from_lanes(0), a1);
    const __m512 c1 = _mm512_permutex2var_ps(a0, columns_from_lanes(1), a1);
    if (j.out_bf16) {
      bf16_t* o = reinterpret_cast<bf16_t*>(t.out) + r * j.out_ld;
      _mm512_mask_storeu_epi16(o, cols, __m512i(_mm512_cvtne2ps_pbh(c1, c0)));
    } else {
      float* o = reinterpret_cast<float*>(t.out) + r * j.out_ld;
      _mm512_mask_storeu_ps(o, lo, c0);
      _mm512_mask_storeu_ps(o + 16, hi, c1);
    }
  }
}

// A tile's sums at its block's end: the output (the reduction's last block) or the partial sums kept.
template <int R>
[[gnu::always_inline]] inline void end_sums(const SumVector (&acc)[R][2], const Job& j, const Tile& t,
                                            __mmask32 cols) {
  if (j.last) return store_output<R>(acc, j, t, cols);
  keep_sums(acc, t.sums, kTileCols);
}

// Lines a step (a pair of weight rows) of Zmm::walk_run's prefetch where a whole tile's weight rows are one
// run of memory (packed: 64 bytes, a line, a row) and its prefetch none or one along a run: 2 a line a row
// (kPackedAheadBytes on), 1 a line every other row (the thread's next chunk, shared by two register blocks);
// 0 where the tile is walked otherwise.
inline int run_lines_a_step(const Job& j, const Tile& t) {
  if (t.cols != kTileCols || j.ld_bytes != kTileCols * 2) return 0;
  if (t.prefetch.runs_along(j.ld_bytes) && t.prefetch.every == 1) return 2;
  return t.prefetch.runs_along(j.ld_bytes / 2) && t.prefetch.every == 2 ? 1 : 0;
}

// The zmm layer (cpu/gemm/gemm_gemv_kernel.h): 12 rows x 32 columns of pair sums (24 accumulators, 2 weight
// pair vectors, 1 broadcast of 32 registers), bf16 pairs staged as dwords.
struct Zmm {
  static constexpr int kBlockRows = 12;
  // A last block under half of kBlockRows keeps too few sums in flight: the last two share their rows.
  // moe_bench_few_rows 3 16 and 32, 2-core Zen 5: 16 rows as 8 + 8 0.67-0.71 TF/s, as 12 + 4 0.61-0.64; 32
  // rows as 12 + 12 + 8 0.84-0.87, as 11 + 11 + 10 0.78-0.86.
  static constexpr int64_t chunk_last_rows(int64_t last, int64_t /*blocks*/) {
    return 2 * last >= kBlockRows ? last : (kBlockRows + last) / 2;
  }
  template <int R>
  static constexpr int64_t kTilesAtOnce = 1;  // its 1-row walks read 0.9-1.1 of a sequential read as they are
  // Chunks from 5 rows: moe_bench_few_rows 3 8 ran 0.87-0.94 of the read against 0.74-0.80 in blocks, 16 rows
  // 0.35-0.37 TF/s against 0.27-0.28 (2-core Zen 4, memory at ~35 GB/s); a probe of both walks at 4 rows
  // ran level, at 1 row the chunks 10 % slower.
  static constexpr int64_t kChunkRows = 5;
  // Few rows keep few DRAM streams open, more rows spend less on the sums' trips to scratch, which counts
  // more the more rows the group has. 2-core Zen 4 (64 experts x 2048 x 1536 bf16, x a sequential read of the
  // same weights in the same process): 1-4 rows 0.89-0.90 at 8 weight rows (0.85 at 16, 0.75 at 32); 8 rows
  // 0.77 at 16 (0.70 at 8); 12 rows 0.69 at 32 (0.63 at 16), before the chunks took 5 rows and more.
  static constexpr int64_t block_depth(int64_t live) { return live <= 4 ? 8 : live <= 8 ? 16 : kMaxDepth; }
  // Two blocks measured 0.77-0.86 of the read at 8 rows against 0.71-0.78 at one (moe_bench_few_rows 3 8,
  // 2-core Zen 4), level or better at 1 and 4 rows.
  static constexpr int64_t blocks_ahead(int64_t /*depth*/) { return 2; }
  static constexpr int64_t kTileCols = gemv::kTileCols, kStep = 2;
  using Staged = int32_t;
  // An odd last element pairs with a zero.
  static void stage(const bf16_t* lhs, int64_t Kd, int64_t live, int64_t k0, int64_t depth, int32_t* x) {
    for (int64_t r = 0; r < live; ++r) {
      const bf16_t* row = lhs + r * Kd + k0;
      for (int64_t p = 0; 2 * p < depth; ++p) {
        const uint32_t lo = row[2 * p], hi = 2 * p + 1 < depth ? row[2 * p + 1] : 0;
        x[p * live + r] = int32_t(lo | hi << 16);
      }
    }
  }
  template <int R>
  static void tile(const Job& j, const Tile& t) {
    if (const int lines = run_lines_a_step(j, t))
      return lines == 2 ? walk_run<R, 2>(j, t) : walk_run<R, 1>(j, t);
    walk_with_prefetch<Zmm, R>(j, t);
  }
  template <int R, bool kFull, class Prefetch>
  static void walk(const Job& j, const Tile& t, Prefetch prefetch);
  template <int R, int kLines>
  static void walk_run(const Job& j, const Tile& t);
};

// One tile of a block for R live rows: sums += lhs pairs . weight pairs.
template <int R, bool kFull, class Prefetch>
void Zmm::walk(const Job& j, const Tile& t, Prefetch prefetch) {
  const __mmask32 cols = kFull ? __mmask32(0xffffffffu) : first_cols(t.cols);
  SumVector acc[R][2];
  start_sums(acc, j.first, t.sums, kTileCols);
  const char* w = t.w;
  const int32_t* x = j.x;
  for (int64_t p = 0; p < j.steps; ++p, w += 2 * j.ld_bytes, x += j.x_stride) {
    const __m512i r0 = load_row(w, cols), r1 = load_row(w + j.ld_bytes, cols);
    prefetch.step();
    prefetch.step();
    multiply_pair<R>(acc, r0, r1, x);
  }
  if (j.odd) multiply_pair<R>(acc, load_row(w, cols), _mm512_setzero_si512(), x);
  end_sums<R>(acc, j, t, cols);
}

// A whole tile whose weights are one run of memory, a pair of rows (two lines) a step, prefetching the two
// lines its distance ahead with no cursor: the cursor's bookkeeping and the mask's test a step were about as
// many instructions as the multiplies at 8 rows, and set the speed where the arithmetic counts. Kept weights,
// 2-core Zen 4, alternately (moe_bench_few_rows 3 R gemv; bf16 peak 0.455 TF/s): 8 rows in L3 (64 -> 4
// experts) 0.365-0.388 -> 0.423-0.440 TF/s; streamed with memory at 43-52 GB/s, 0.75-1.02 of the read
// (0.26-0.35 TF/s) -> 0.94-1.06 (0.37-0.40); 12 rows 0.356-0.372 -> 0.373-0.405 TF/s; 1 and 4 rows level.
template <int R, int kLines>
void Zmm::walk_run(const Job& j, const Tile& t) {
  constexpr int64_t kRow = kTileCols * 2;
  SumVector acc[R][2];
  start_sums(acc, j.first, t.sums, kTileCols);
  const char* w = t.w;
  RowPrefetch ahead{t.prefetch.row, kRow};  // a line a step of it; nullptr: none
  const int32_t* x = j.x;
  const int64_t steps = j.steps, x_stride = j.x_stride;
  for (int64_t p = 0; p < steps; ++p, w += 2 * kRow, x += x_stride) {
    if (ahead.row) {
#pragma GCC unroll 2
      for (int line = 0; line < kLines; ++line) ahead.step();
    }
    multiply_pair<R>(acc, _mm512_loadu_si512(w), _mm512_loadu_si512(w + kRow), x);
  }
  if (j.odd) multiply_pair<R>(acc, _mm512_loadu_si512(w), _mm512_setzero_si512(), x);
  end_sums<R>(acc, j, t, __mmask32(0xffffffffu));
}

// nt's zmm layer (cpu/gemm/gemm_gemv_nt_kernel.h): two weight rows x 8 dout rows of pair sums a step of 32
// columns (16 accumulators, 2 weight vectors, 1 dout vector), vdpbf16ps on the bf16 pairs as they lie.
struct ZmmNt {
  static constexpr int kNtBlockRows = 8;
  template <int R>
  static void dot_rows(const NtJob& j);
};

template <int R>
void ZmmNt::dot_rows(const NtJob& j) {
  const int64_t ahead = nt_ahead(j);
  for (int64_t k = 0; k < j.rows; k += 2) {
    const bool pair = k + 1 < j.rows;
    SumVector acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = SumVector{};
    for (int p = 0; p < j.parts; ++p) {
      const bf16_t* w0 = j.w[p] + k * j.part_cols;
      const bf16_t* d = j.dout + p * j.part_cols;
      for (int64_t n = 0; n < j.part_cols; n += 32) {
        const __mmask32 cols = first_cols(j.part_cols - n);
        __builtin_prefetch(w0 + ahead + n, 0, 2);  // into L2 (nt_ahead)
        __builtin_prefetch(w0 + ahead + j.part_cols + n, 0, 2);
        const __m512bh a = __m512bh(_mm512_maskz_loadu_epi16(cols, w0 + n));
        const __m512bh b =
            __m512bh(pair ? _mm512_maskz_loadu_epi16(cols, w0 + j.part_cols + n) : _mm512_setzero_si512());
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512bh x = __m512bh(_mm512_maskz_loadu_epi16(cols, d + r * j.N + n));
          acc[r][0] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][0]), a, x));
          acc[r][1] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][1]), b, x));
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      store_dot(j, r, k, _mm512_reduce_add_ps(__m512(acc[r][0])));
      if (pair) store_dot(j, r, k + 1, _mm512_reduce_add_ps(__m512(acc[r][1])));
    }
  }
}

// tn's zmm layer (cpu/gemm/gemm_gemv_tn_kernel.h): the group's rows in pairs, lhs as dwords of a pair's two
// values at a weight row (broadcast) and dout as dwords of a pair's two values at a column, so that vdpbf16ps
// sums a pair's two products a column; 4 gradient rows x 32 columns a tile (8 accumulators, 2 dout vectors,
// 1 broadcast), rounded once (bf16) and written a line a row.
struct ZmmTn {
  using Staged = int32_t;
  static constexpr int64_t kTnCols = 32;
  static int64_t pairs(int64_t live) { return (live + 1) / 2; }
  static int64_t staged_size(int64_t live, int64_t Kd, int64_t N) { return pairs(live) * (Kd + N); }
  // lhs pairs (Kd, pairs) then dout pairs (pairs, N); an odd last row pairs with zeros.
  static void stage(const bf16_t* lhs, const bf16_t* dout, int64_t ld_dout, int64_t live, int64_t Kd,
                    int64_t N, int32_t* staged) {
    const int64_t P = pairs(live);
    for (int64_t p = 0; p < P; ++p) {
      const bool two = 2 * p + 1 < live;
      for (int64_t k = 0; k < Kd; ++k)
        staged[k * P + p] =
            int32_t(uint32_t(lhs[2 * p * Kd + k]) | (two ? uint32_t(lhs[(2 * p + 1) * Kd + k]) << 16 : 0u));
      int32_t* d = staged + Kd * P + p * N;
      for (int64_t n = 0; n < N; ++n)
        d[n] = int32_t(uint32_t(dout[2 * p * ld_dout + n]) |
                       (two ? uint32_t(dout[(2 * p + 1) * ld_dout + n]) << 16 : 0u));
    }
  }
  template <int K>
  static void rows(const TnJob<int32_t>& j, int64_t k);
  static void run(const TnJob<int32_t>& j) {
    int64_t k = j.k0;
    for (; k + 4 <= j.k1; k += 4) rows<4>(j, k);
    for (; k < j.k1; ++k) rows<1>(j, k);
  }
};

// A row's 32 columns from n (the first `cols`), streamed where they are a whole aligned line.
inline void store_grad_bf16(bf16_t* o, __m512 lo, __m512 hi, __mmask32 cols) {
  const __m512i v = __m512i(_mm512_cvtne2ps_pbh(hi, lo));
  if (cols == __mmask32(0xffffffffu) && reinterpret_cast<uintptr_t>(o) % 64 == 0)
    return _mm512_stream_si512(reinterpret_cast<__m512i*>(o), v);
  _mm512_mask_storeu_epi16(o, cols, v);
}
inline void store_grad_f32(float* o, __m512 v, __mmask16 cols) {
  if (cols == __mmask16(0xffff) && reinterpret_cast<uintptr_t>(o) % 64 == 0) return _mm512_stream_ps(o, v);
  _mm512_mask_storeu_ps(o, cols, v);
}

template <int K>
void ZmmTn::rows(const TnJob<int32_t>& j, int64_t k) {
  const int64_t P = pairs(j.live);
  const int32_t* x = j.staged + k * P;
  const int32_t* d = j.staged + j.Kd * P;
  for (int64_t n = 0; n < j.N; n += kTnCols) {
    const __mmask32 cols = first_cols(j.N - n);
    const __mmask16 lo = __mmask16(cols & 0xffffu), hi = __mmask16(cols >> 16);
    SumVector acc[K][2];
#pragma GCC unroll 4
    for (int r = 0; r < K; ++r) acc[r][0] = acc[r][1] = SumVector{};
    for (int64_t p = 0; p < P; ++p) {
      const __m512bh d0 = __m512bh(_mm512_maskz_loadu_epi32(lo, d + p * j.N + n));
      const __m512bh d1 = __m512bh(_mm512_maskz_loadu_epi32(hi, d + p * j.N + n + 16));
#pragma GCC unroll 4
      for (int r = 0; r < K; ++r) {
        const __m512bh a = __m512bh(_mm512_set1_epi32(x[r * P + p]));
        acc[r][0] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][0]), d0, a));
        acc[r][1] = SumVector(_mm512_dpbf16_ps(__m512(acc[r][1]), d1, a));
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < K; ++r) {
      const int64_t at = (k - j.k0 + r) * j.N + n;
      if (j.out_bf16) {
        store_grad_bf16(reinterpret_cast<bf16_t*>(j.out) + at, __m512(acc[r][0]), __m512(acc[r][1]), cols);
      } else {
        store_grad_f32(reinterpret_cast<float*>(j.out) + at, __m512(acc[r][0]), lo);
        store_grad_f32(reinterpret_cast<float*>(j.out) + at + 16, __m512(acc[r][1]), hi);
      }
    }
  }
}

}  // namespace

MOE_DEFINE_GEMV_NN(Zmm)
MOE_DEFINE_GEMV_NT(ZmmNt)
MOE_DEFINE_GEMV_TN(ZmmTn)

}  // namespace moe::cpu::isa_avx512_bf16::gemv

#pragma GCC pop_options
