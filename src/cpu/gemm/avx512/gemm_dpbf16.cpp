// cpu/gemm/gemm.h's grouped forms on our own AVX-512 micro-kernel, for the expert groups of MoE: bfloat16
// with vdpbf16ps (a pair of reduction elements per 32-bit broadcast), float32 with vfmadd231ps (one
// element per broadcast), the same tiles, packing and epilogues. Its rows (the kernel table, cpu/gemm/gemm.h)
// take what supports() accepts, where these kernels measured faster; the table runs oneDNN's row for the
// rest (groups above dpbf16_max_group_rows, dense GEMMs, bf16 inputs with a float32 SwiGLU output), and
// rows' gemm_kernels name the variant that ran per form.
//
// Why not oneDNN at small groups: brgemm copies each expert's weights into its blocked layout in a
// pass of its own before it multiplies, so the DRAM stream of the weights (which change every step in
// training and may not be packed once outside the timed call) does not overlap the arithmetic; at 137
// rows per expert that costs ~15 % (2-core Zen 5: prepacked weights 0.93 TF/s, packed per call 0.80).
// Here:
//  - weights are packed one panel (up to kPanelSteps reduction steps x 128 or 256 columns) at a time
//    into the layout the kernel reads: by the first row block on the way (weights with the reduction
//    along rows: nn), or in a pass of its own (read transposed: nt);
//  - while a panel is multiplied, the other row blocks prefetch the raw lines of the next panel into
//    L2, one per reduction step, so the weight stream overlaps the arithmetic;
//  - activations are read where they lie: a bf16 pair (k, k+1) of a row, or a float, is one broadcast;
//  - each thread owns a fixed slice of the output columns across every group: no barriers, and each
//    weight byte is read by one thread (oneDNN's threads split the few rows and both read it).
// tn (weight gradients) packs both of its small operands (the group's rows are its reduction): lhs^T
// shared by the team in a pass, dout by the first row block of the gradient on the way; each row
// block is written across a group of the thread's tiles whose packed dout stays in L2. nn_swiglu's tiles hold
// 16 gate and the same 16 up columns, so SwiGLU runs on the tile's sums before anything is stored. Outputs of
// dpbf16_stream_bytes or more leave with non-temporal stores (SwiGLU's through a staging row block). Known
// weakness: the packing row block is slower on weights whose rows are a power of two bytes apart (4 KiB at N
// = 2048): its 64-byte reads are 4 KiB apart, and the next panel's prefetched lines use 1/16 of L2's sets
// (docs/kernels.md).
//
// Packed panel layout: per 32-column tile, per reduction step s, two vectors of 16 dwords. bf16: in
// "lane order" (see interleave_pair), a dword holds (b[2s][col], b[2s + 1][col]), the even element in
// the low half, and an odd reduction length packs a zero second element; float32: b[s][col], columns
// in order. Register tile: 12 rows x 32 columns.
// Accumulation is float32 in registers, and across panels in a per-thread float32 scratch; a bf16
// output is rounded once, to nearest even. float32 SwiGLU tiles keep h and compute g unrounded, as
// swiglu_forward does from float32 h.
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

#include "cpu/gemm/tile_rows.h"
#include "cpu/gemm/work_shares.h"
#include "cpu/gemm/zero_gradient.h"
#include "moe/cpu_isa.h"

// Everything from here to pop_options is AVX-512 BF16 code, whatever the build's -march: every build has
// this variant and the registry runs it only where isa_level() reaches avx512_bf16. The headers above are
// compiled for the build's ISA, so the library code they instantiate (the linker keeps one copy of each)
// never carries an instruction the build's baseline lacks; vec_math.h comes after the pragma and puts its
// AVX-512 functions in an inline namespace of this ISA's name, apart from other files' copies.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,bmi,bmi2")

#define MOE_TARGET_AVX512_BF16 1
#include "cpu/ops/vec_math.h"

namespace moe::cpu::isa_avx512_bf16::dpbf16 {
namespace {

using namespace gemm_detail;  // at, check_groups, group_rows, zero_padding_rows

constexpr int kTileRows = 12;  // 24 accumulators + 2 weight vectors + 1 broadcast of 32 registers
constexpr int64_t kTileCols = 32;
// Reduction elements one 32-bit broadcast holds: a bf16 pair (vdpbf16ps), one float (vfmadd231ps).
template <class T>
constexpr int64_t kPerStep = int64_t(sizeof(int32_t) / sizeof(T));
// A panel's reduction depth: 1024 elements, so a reduction of up to 1024 (the hidden sizes of most
// models' up projections) is one panel and its partial sums never leave the registers.
constexpr int64_t kPanelDepth = 1024;  // even: panels split the reduction at steps
template <class T>
constexpr int64_t kPanelSteps = kPanelDepth / kPerStep<T>;
constexpr int64_t kPanelCols = 128;  // nt's, and nn_swiglu's (64 gate + 64 up)
// bf16 nn's panels are twice as wide: a panel's rows are then 512 bytes, so its prefetched and packed
// lines spread over 4x the L2 sets where the weights' rows are a multiple of 4 KiB apart (137 x 1408 x
// 2048: 0.86-0.87 -> 0.91-0.96 TF/s, 128 x 768 x 2048 +3-6 %; 1024-row groups level; nn_swiglu and nt
// measured level to 2 % slower with 256, so they keep 128). A float32 panel of 1024 x 128 is as many
// bytes (512 KiB) as a bf16 one of 1024 x 256.
template <class T>
constexpr int64_t kNnPanelCols = std::is_same_v<T, bf16_t> ? 256 : 128;
constexpr int64_t kMaxPanelCols = 256;
// A packed panel's bytes (a dword per step and column), the widest of either type.
template <class T>
constexpr int64_t kPanelBytes = kPanelSteps<T>* kNnPanelCols<T> * 4;
constexpr int64_t kMaxPanelBytes = std::max(kPanelBytes<bf16_t>, kPanelBytes<float>);
// nn's panels are each type's widest (so kMaxPanelBytes holds nt's and nn_swiglu's too), and every
// panel's partial sums fit a row of `partial` (kMaxPanelCols).
static_assert(kPanelCols <= kNnPanelCols<float> && kNnPanelCols<bf16_t> <= kMaxPanelCols);
// The thresholds (GemmThresholds, KernelConfig; each with its measurement in moe/config.h and
// docs/kernels.md): groups of at most dpbf16_max_group_rows live rows (above, oneDNN's brgemm, which also
// blocks the rows, is as fast or faster; the largest group decides for the whole call); float32 nn and nt
// at every such size, nn_swiglu from dpbf16_min_f32_swiglu_rows (546 rows +5-9 %, 384 +2 %, 256 level, 137
// -3 % against oneDNN's matmul), tn bf16 only (ours 0.96-1.00 of oneDNN's float32 at 1024 rows); outputs
// from dpbf16_stream_bytes leave with non-temporal stores (no line is fetched before it is overwritten,
// and rows a power of two bytes apart no longer pile a tile's rows into one L1 set: 1024 x 1024 x 2048 nn
// on 2-core Zen 5 0.90 -> 0.97-1.00 TF/s).

// The operand the kernel broadcasts: step s of row m (a bf16 pair, elements 2s and 2s + 1, or one
// float) starts at base + m * row_ld + s * step_ld (elements; any alignment).
template <class T>
struct StepRows {
  const T* base;
  int64_t row_ld, step_ld;
};

// Lines of the next panel's raw source to pull into L2 while this tile multiplies: `count` lines
// starting at line `line` of row `row` (rows are `ld_bytes` apart, `lines_per_row` lines each).
struct Prefetch {
  const char* row = nullptr;
  int64_t ld_bytes = 0;
  int64_t lines_per_row = 1;
  int64_t line = 0;
  int64_t count = 0;
};

// Issues the next `count` prefetches of `all` (into L2), advancing it.
void prefetch_lines(Prefetch& all, int64_t count) {
  for (count = std::min(count, all.count); count > 0; --count, --all.count) {
    _mm_prefetch(all.row + all.line * 64, _MM_HINT_T1);
    if (++all.line == all.lines_per_row) {
      all.line = 0;
      all.row += all.ld_bytes;
    }
  }
}

// The next `count` lines of `all` as a Prefetch of their own; `all` moves past them.
Prefetch take_lines(Prefetch& all, int64_t count) {
  Prefetch part = all;
  part.count = std::min(count, all.count);
  const int64_t end = all.line + part.count;
  all.row += end / all.lines_per_row * all.ld_bytes;
  all.line = end % all.lines_per_row;
  all.count -= part.count;
  return part;
}

template <class T>
struct TileJob {
  StepRows<T> a;
  __m512i* panel;  // (steps + odd, 2) vectors of this tile; written first when packing
  // Packing on the way (the panel's first row block, weights as stored with the reduction along rows):
  // the tile's weight rows, ld apart, and which of its 32 columns exist.
  const T* raw;
  int64_t raw_ld;
  __mmask32 raw_cols;  // float32: the first vector's 16 columns in the low half, the second's above
  // SwiGLU packing reads whole lines, 32 columns of gate and of up: this tile's 16 and the next tile's,
  // whose vectors go `next_tile` vectors further (0: there is none).
  int64_t next_tile = 0;
  Prefetch ahead;  // lines of the next panel to pull into L2, one per reduction step
  int64_t steps;
  bool odd;         // bf16: one more reduction element, a's second of that pair not read
  int64_t cols;     // valid columns of the tile, 1..32
  const float* in;  // (rows, cols) float32 partial sums to add to, or nullptr
  int64_t in_ld;
  void* out;  // (rows, cols)
  int64_t out_ld;
  bool out_bf16;
  bool stream = false;  // out is final: whole 64-byte lines go out with non-temporal stores
  // A SwiGLU tile (nn_swiglu): 16 gate columns (vector 0, raw) and the same 16 up columns (vector 1,
  // raw_up), `cols` of them valid. At the last panel h's gate goes to out, its up to out + up_offset
  // (when keep_h), and g = silu(gate) * up * row_weight[m] to g.
  const T* raw_up = nullptr;
  T* g = nullptr;
  int64_t g_ld = 0;
  int64_t up_offset = 0;
  const float* row_weight = nullptr;  // (Rows) or nullptr
  bool keep_h = true;
  // A SwiGLU gradient tile (nt_swiglu_grad): its sums are dg; h's gate at these rows and columns (out_ld
  // apart, up at up_offset further, as in out = dh), and row_weight, give dgate to out and dup to
  // out + up_offset.
  const T* h = nullptr;
};

// A plain 16 x int32 vector: unlike __m512i (declared may_alias), a store of it cannot alias the
// kernel's float accumulators, which GCC would otherwise keep in memory across the packing stores.
using PairVector = int32_t __attribute__((vector_size(64)));
// The same for the accumulators (__m512 is may_alias as well).
using SumVector = float __attribute__((vector_size(64)));

// Two rows of 32 bf16 (r1 zero past the reduction) -> the two pair vectors of a tile in "lane order":
// unpack interleaves within 128-bit lanes, so dword i of vector v is column (i / 4) * 8 + v * 4 + i % 4.
// Panels keep that order (no permute, and no permute indices to hold in registers while packing);
// the kernel puts columns in order when it loads or stores sums.
inline void interleave_pair(__m512i r0, __m512i r1, __m512i* dst) {
  auto* out = reinterpret_cast<PairVector*>(dst);
  out[0] = PairVector(_mm512_unpacklo_epi16(r0, r1));
  out[1] = PairVector(_mm512_unpackhi_epi16(r0, r1));
}

// Lane order <-> column order of a tile's two vectors (index into the concatenation of both).
inline __m512i lanes_from_columns(int v) {
  return v == 0 ? _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
                : _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}
inline __m512i columns_from_lanes(int half) {
  return half == 0 ? _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23)
                   : _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}
inline int64_t column_of_lane(int v, int i) {
  return (i / 4) * 8 + v * 4 + i % 4;
}

template <class T, int M>
inline void multiply_row(SumVector (&acc)[2], __m512i b0, __m512i b1, const char* row) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    int32_t pair;
    std::memcpy(&pair, row, 4);
    const __m512bh av = __m512bh(_mm512_set1_epi32(pair));
    acc[0] = SumVector(_mm512_dpbf16_ps(__m512(acc[0]), __m512bh(b0), av));
    acc[1] = SumVector(_mm512_dpbf16_ps(__m512(acc[1]), __m512bh(b1), av));
  } else {
    float value;
    std::memcpy(&value, row, 4);
    const __m512 av = _mm512_set1_ps(value);
    acc[0] = SumVector(_mm512_fmadd_ps(_mm512_castsi512_ps(b0), av, __m512(acc[0])));
    acc[1] = SumVector(_mm512_fmadd_ps(_mm512_castsi512_ps(b1), av, __m512(acc[1])));
  }
}

// What a tile kernel does besides multiplying: pack its panel on the way, and / or SwiGLU (or SwiGLU's
// backward) at the end.
enum TileMode { kMultiply, kPack, kSwiglu, kSwigluPack, kSwigluGrad, kTileModes };

using cpu::bf16_to_f32;

// g = silu(gate) * up * w, as swiglu_forward computes it from stored h (bf16: h's rounded values), with
// the epilogues' sigmoid16.
inline __m512 swiglu_row(__m512 gate, __m512 up, float w) {
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gate, cpu::sigmoid16(gate)), up), _mm512_set1_ps(w));
}

// dgate and dup from dg (as stored), gate, up and w, as swiglu_backward computes them.
inline void swiglu_grad_row(__m512 dg, __m512 gate, __m512 up, float w, __m512& dgate, __m512& dup) {
  const __m512 s = cpu::sigmoid16(gate), dgw = _mm512_mul_ps(dg, _mm512_set1_ps(w));
  const __m512 one = _mm512_set1_ps(1.0f);
  // dgw * up * s * (1 + gate * (1 - s)), dgw * gate * s
  dgate = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dgw, up), s),
                        _mm512_fmadd_ps(gate, _mm512_sub_ps(one, s), one));
  dup = _mm512_mul_ps(_mm512_mul_ps(dgw, gate), s);
}

inline __mmask32 first_elements(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << n) - 1);
}

inline bool whole_line(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 63) == 0;
}

// Masked loads only for a ragged last tile: they measured slower on the weight stream.
inline __m512i whole_or_masked(const bf16_t* p, __mmask32 cols) {
  return cols == __mmask32(0xffffffffu) ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(cols, p);
}
inline __m512i whole_or_masked(const float* p, __mmask16 cols) {
  return cols == __mmask16(0xffff) ? _mm512_loadu_si512(p)
                                   : _mm512_castps_si512(_mm512_maskz_loadu_ps(cols, p));
}

// Rows 2p and 2p + 1 of 32 gate and 32 up columns -> pair p of this SwiGLU tile (the low 16 columns of
// each) at b and, with next_tile, of the next tile (the high 16) at b + next_tile. Reading whole lines
// once: tile by tile, each 64-byte line was read twice, a whole tile call apart (3x the packing time).
inline void pack_swiglu_pair(__m512i gate0, __m512i up0, __m512i gate1, __m512i up1, __m512i* b,
                             int64_t next_tile) {
  interleave_pair(_mm512_shuffle_i64x2(gate0, up0, 0x44), _mm512_shuffle_i64x2(gate1, up1, 0x44), b);
  if (next_tile)
    interleave_pair(_mm512_shuffle_i64x2(gate0, up0, 0xee), _mm512_shuffle_i64x2(gate1, up1, 0xee),
                    b + next_tile);
}

// Two vectors to b as they are (float32 panels keep columns in order).
inline void store_pair(__m512i v0, __m512i v1, __m512i* b) {
  auto* out = reinterpret_cast<PairVector*>(b);
  out[0] = PairVector(v0);
  out[1] = PairVector(v1);
}

inline __mmask16 low16(__mmask32 m) {
  return __mmask16(m & 0xffffu);
}
inline __mmask16 high16(__mmask32 m) {
  return __mmask16(m >> 16);
}

// A tile's outputs, in column order: to 16 columns at o (masked) or, streaming, whole lines.
inline void store_f32(float* o, __m512 v, __mmask16 mask, bool stream) {
  if (stream)
    _mm512_stream_ps(o, v);
  else
    _mm512_mask_storeu_ps(o, mask, v);
}

// The tile kernel's parts, each always inlined into it (one function's registers, as when it was whole).

// The sums start at j.in's partial sums (bf16 panels: in the panel's lane order) or at zero.
template <class T, int Rows>
[[gnu::always_inline]] inline void start_sums(SumVector (&acc)[Rows][2], const TileJob<T>& j, __mmask16 mask0,
                                              __mmask16 mask1) {
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
    if (!j.in) {
      acc[m][0] = acc[m][1] = SumVector{};
      continue;
    }
    const __m512 c0 = _mm512_maskz_loadu_ps(mask0, j.in + m * j.in_ld);
    const __m512 c1 = _mm512_maskz_loadu_ps(mask1, j.in + m * j.in_ld + 16);
    if constexpr (std::is_same_v<T, bf16_t>) {
      acc[m][0] = SumVector(_mm512_permutex2var_ps(c0, lanes_from_columns(0), c1));
      acc[m][1] = SumVector(_mm512_permutex2var_ps(c0, lanes_from_columns(1), c1));
    } else {
      acc[m][0] = SumVector(c0);
      acc[m][1] = SumVector(c1);
    }
  }
}

// A SwiGLU gradient tile: h's lines for the epilogue, into L2 while the tile multiplies (a float32 tile's
// 32 columns are two lines of gate and two of up).
template <class T, int Rows>
[[gnu::always_inline]] inline void prefetch_h(const TileJob<T>& j) {
  for (int m = 0; m < Rows; ++m)
    for (int64_t c = 0; c < j.cols; c += 64 / int64_t(sizeof(T))) {
      _mm_prefetch(reinterpret_cast<const char*>(j.h + m * j.out_ld + c), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(j.h + m * j.out_ld + j.up_offset + c), _MM_HINT_T1);
    }
}

// Packing on the way: one reduction step's two vectors of the panel (at b) from the weights as stored.
template <class T, TileMode Mode>
[[gnu::always_inline]] inline void pack_step(const T*& raw, const T*& raw_up, int64_t raw_ld,
                                             __mmask32 raw_cols, int64_t next_tile, __m512i* b) {
  constexpr bool Swiglu = Mode == kSwigluPack, kLaneOrder = std::is_same_v<T, bf16_t>;
  if constexpr (Swiglu && kLaneOrder) {
    pack_swiglu_pair(whole_or_masked(raw, raw_cols), whole_or_masked(raw_up, raw_cols),
                     whole_or_masked(raw + raw_ld, raw_cols), whole_or_masked(raw_up + raw_ld, raw_cols), b,
                     next_tile);
    raw += 2 * raw_ld;
    raw_up += 2 * raw_ld;
  } else if constexpr (Swiglu) {
    // 16 gate and 16 up columns: one whole line of each.
    store_pair(whole_or_masked(raw, low16(raw_cols)), whole_or_masked(raw_up, low16(raw_cols)), b);
    raw += raw_ld;
    raw_up += raw_ld;
  } else if constexpr (kLaneOrder) {
    // The next tile's rows, for the next call (the lines after these are not a sequential stream).
    _mm_prefetch(reinterpret_cast<const char*>(raw + kTileCols), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(raw + raw_ld + kTileCols), _MM_HINT_T0);
    interleave_pair(whole_or_masked(raw, raw_cols), whole_or_masked(raw + raw_ld, raw_cols), b);
    raw += 2 * raw_ld;
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(raw + kTileCols), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(raw + kTileCols + 16), _MM_HINT_T0);
    store_pair(whole_or_masked(raw, low16(raw_cols)), whole_or_masked(raw + 16, high16(raw_cols)), b);
    raw += raw_ld;
  }
}

// A bf16 reduction's odd last element: its pair's second half is zero in the panel (packed here where the
// tile packs), and a's is not read.
template <int Rows, TileMode Mode>
[[gnu::always_inline]] inline void odd_step(SumVector (&acc)[Rows][2], const bf16_t* raw,
                                            const bf16_t* raw_up, __mmask32 raw_cols, int64_t next_tile,
                                            __m512i* b, const char* p, int64_t rb) {
  if constexpr (Mode == kSwigluPack)
    pack_swiglu_pair(whole_or_masked(raw, raw_cols), whole_or_masked(raw_up, raw_cols),
                     _mm512_setzero_si512(), _mm512_setzero_si512(), b, next_tile);
  else if constexpr (Mode == kPack)
    interleave_pair(_mm512_maskz_loadu_epi16(raw_cols, raw), _mm512_setzero_si512(), b);
  const __m512bh b0 = __m512bh(_mm512_load_si512(b)), b1 = __m512bh(_mm512_load_si512(b + 1));
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
    bf16_t last;
    std::memcpy(&last, p + m * rb, 2);
    const __m512bh av = __m512bh(_mm512_set1_epi32(int32_t(last)));
    acc[m][0] = SumVector(_mm512_dpbf16_ps(__m512(acc[m][0]), b0, av));
    acc[m][1] = SumVector(_mm512_dpbf16_ps(__m512(acc[m][1]), b1, av));
  }
}

// Row m of a SwiGLU gradient tile: its sums (c0, c1: dg in column order) with h's gate and up at the same
// place give dgate to out and dup to out + up_offset.
template <class T>
[[gnu::always_inline]] inline void store_swiglu_grad_row(const TileJob<T>& j, int m, __m512 c0, __m512 c1,
                                                         __mmask16 mask0, __mmask16 mask1) {
  const T* h = j.h + m * j.out_ld;
  T* o = static_cast<T*>(j.out) + m * j.out_ld;
  T* o_up = o + j.up_offset;
  const float w = j.row_weight ? j.row_weight[m] : 1.0f;
  const bool whole = j.stream && j.cols == kTileCols;
  __m512 gate0, gate1, up0, up1, d0 = c0, d1 = c1, dgate0, dgate1, dup0, dup1;
  if constexpr (std::is_same_v<T, bf16_t>) {
    const __mmask32 cols = first_elements(j.cols);
    const __m512i gate = _mm512_maskz_loadu_epi16(cols, h),
                  up = _mm512_maskz_loadu_epi16(cols, h + j.up_offset);
    gate0 = bf16_to_f32(_mm512_castsi512_si256(gate));
    gate1 = bf16_to_f32(_mm512_extracti64x4_epi64(gate, 1));
    up0 = bf16_to_f32(_mm512_castsi512_si256(up));
    up1 = bf16_to_f32(_mm512_extracti64x4_epi64(up, 1));
    // dg as a stored bf16 dg holds it.
    d0 = bf16_to_f32(__m256i(_mm512_cvtneps_pbh(c0)));
    d1 = bf16_to_f32(__m256i(_mm512_cvtneps_pbh(c1)));
    swiglu_grad_row(d0, gate0, up0, w, dgate0, dup0);
    swiglu_grad_row(d1, gate1, up1, w, dgate1, dup1);
    const __m512i dgate = __m512i(_mm512_cvtne2ps_pbh(dgate1, dgate0)),
                  dup = __m512i(_mm512_cvtne2ps_pbh(dup1, dup0));
    if (whole && whole_line(o))
      _mm512_stream_si512(reinterpret_cast<__m512i*>(o), dgate);
    else
      _mm512_mask_storeu_epi16(o, first_elements(j.cols), dgate);
    if (whole && whole_line(o_up))
      _mm512_stream_si512(reinterpret_cast<__m512i*>(o_up), dup);
    else
      _mm512_mask_storeu_epi16(o_up, first_elements(j.cols), dup);
  } else {
    gate0 = _mm512_maskz_loadu_ps(mask0, h);
    gate1 = _mm512_maskz_loadu_ps(mask1, h + 16);
    up0 = _mm512_maskz_loadu_ps(mask0, h + j.up_offset);
    up1 = _mm512_maskz_loadu_ps(mask1, h + j.up_offset + 16);
    swiglu_grad_row(d0, gate0, up0, w, dgate0, dup0);
    swiglu_grad_row(d1, gate1, up1, w, dgate1, dup1);
    store_f32(o, dgate0, mask0, whole && whole_line(o));
    store_f32(o + 16, dgate1, mask1, whole && whole_line(o));
    store_f32(o_up, dup0, mask0, whole && whole_line(o_up));
    store_f32(o_up + 16, dup1, mask1, whole && whole_line(o_up));
  }
}

// Row m of a SwiGLU tile at its last panel: h's gate (c0) and up (c1) to out (when kept) and g.
template <class T>
[[gnu::always_inline]] inline void store_swiglu_row(const TileJob<T>& j, int m, __m512 c0, __m512 c1,
                                                    __mmask16 mask0) {
  T* h = static_cast<T*>(j.out) + m * j.out_ld;
  const float w = j.row_weight ? j.row_weight[m] : 1.0f;
  if constexpr (std::is_same_v<T, bf16_t>) {
    const __m256i gate = __m256i(_mm512_cvtneps_pbh(c0)), up = __m256i(_mm512_cvtneps_pbh(c1));
    if (j.keep_h) {
      _mm256_mask_storeu_epi16(h, mask0, gate);
      _mm256_mask_storeu_epi16(h + j.up_offset, mask0, up);
    }
    _mm256_mask_storeu_epi16(j.g + m * j.g_ld, mask0,
                             __m256i(_mm512_cvtneps_pbh(swiglu_row(bf16_to_f32(gate), bf16_to_f32(up), w))));
  } else {
    if (j.keep_h) {
      _mm512_mask_storeu_ps(h, mask0, c0);
      _mm512_mask_storeu_ps(h + j.up_offset, mask0, c1);
    }
    _mm512_mask_storeu_ps(j.g + m * j.g_ld, mask0, swiglu_row(c0, c1, w));
  }
}

// Row m of a plain tile: its 32 sums to out, bf16 or float32.
template <class T>
[[gnu::always_inline]] inline void store_row(const TileJob<T>& j, int m, __m512 c0, __m512 c1,
                                             __mmask16 mask0, __mmask16 mask1) {
  if (j.out_bf16) {
    const __m512i both = _mm512_inserti64x4(_mm512_zextsi256_si512(__m256i(_mm512_cvtneps_pbh(c0))),
                                            __m256i(_mm512_cvtneps_pbh(c1)), 1);
    bf16_t* o = static_cast<bf16_t*>(j.out) + m * j.out_ld;
    if (j.stream && j.cols == kTileCols && whole_line(o))
      _mm512_stream_si512(reinterpret_cast<__m512i*>(o), both);
    else
      _mm512_mask_storeu_epi16(o, first_elements(j.cols), both);
  } else {
    float* o = static_cast<float*>(j.out) + m * j.out_ld;
    const bool stream = j.stream && j.cols == kTileCols && whole_line(o);
    store_f32(o, c0, mask0, stream);
    store_f32(o + 16, c1, mask1, stream);
  }
}

template <class T, int Rows, TileMode Mode>
void tile_kernel(const TileJob<T>& j) {
  constexpr bool Pack = Mode == kPack || Mode == kSwigluPack;
  constexpr bool Swiglu = Mode == kSwiglu || Mode == kSwigluPack;
  // bf16 panels hold columns in lane order (interleave_pair); float32 panels in column order.
  constexpr bool kLaneOrder = std::is_same_v<T, bf16_t>;
  // A SwiGLU tile's two vectors hold the same `cols` columns of gate and up.
  const int64_t cols0 = Swiglu ? j.cols : std::min<int64_t>(j.cols, 16),
                cols1 = Swiglu ? j.cols : j.cols - 16;
  const __mmask16 mask0 = cols0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols0) - 1);
  const __mmask16 mask1 = cols1 >= 16 ? __mmask16(0xffff) : cols1 > 0 ? __mmask16((1u << cols1) - 1) : 0;
  SumVector acc[Rows][2];
  start_sums<T, Rows>(acc, j, mask0, mask1);
  if constexpr (Mode == kSwigluGrad) prefetch_h<T, Rows>(j);
  // Locals, not j's fields: the packing stores would otherwise make GCC reload them every step.
  const int64_t rb = j.a.row_ld * int64_t(sizeof(T)), rb3 = 3 * rb,
                step_bytes = j.a.step_ld * int64_t(sizeof(T));
  const char* p = reinterpret_cast<const char*>(j.a.base);
  const char* q = p + 5 * rb;
  const char* r = p + 10 * rb;
  __m512i* b = j.panel;
  const T* raw = j.raw;
  const T* raw_up = j.raw_up;
  const int64_t raw_ld = j.raw_ld;
  const __mmask32 raw_cols = j.raw_cols;
  const int64_t next_tile = j.next_tile;
  Prefetch ahead = j.ahead;
  for (const __m512i* end = b + 2 * j.steps; b != end; b += 2) {
    if (ahead.count > 0) prefetch_lines(ahead, 1);
    if constexpr (Pack) pack_step<T, Mode>(raw, raw_up, raw_ld, raw_cols, next_tile, b);
    const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 1);
    [&]<int... M>(std::integer_sequence<int, M...>) {
      (multiply_row<T, M>(acc[M], b0, b1, tile_row<M>(p, q, r, rb, rb3)), ...);
    }
    (std::make_integer_sequence<int, Rows>{});
    p += step_bytes;
    q += step_bytes;
    r += step_bytes;
  }
  prefetch_lines(ahead, ahead.count);
  if constexpr (kLaneOrder)
    if (j.odd) odd_step<Rows, Mode>(acc, raw, raw_up, raw_cols, next_tile, b, p, rb);
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
    __m512 c0 = __m512(acc[m][0]), c1 = __m512(acc[m][1]);
    if constexpr (kLaneOrder) {
      c0 = _mm512_permutex2var_ps(__m512(acc[m][0]), columns_from_lanes(0), __m512(acc[m][1]));
      c1 = _mm512_permutex2var_ps(__m512(acc[m][0]), columns_from_lanes(1), __m512(acc[m][1]));
    }
    if constexpr (Mode == kSwigluGrad)
      store_swiglu_grad_row(j, m, c0, c1, mask0, mask1);
    else if (Swiglu && j.g)
      store_swiglu_row(j, m, c0, c1, mask0);
    else
      store_row(j, m, c0, c1, mask0, mask1);
  }
}

template <class T, TileMode Mode, int... R>
constexpr std::array<void (*)(const TileJob<T>&), sizeof...(R)> kernels_by_rows(
    std::integer_sequence<int, R...>) {
  return {&tile_kernel<T, R + 1, Mode>...};
}
// kTileKernels<T>[mode][r - 1] multiplies r rows.
template <class T>
constexpr std::array<void (*)(const TileJob<T>&), kTileRows> kTileKernels[kTileModes] = {
    kernels_by_rows<T, kMultiply>(std::make_integer_sequence<int, kTileRows>{}),
    kernels_by_rows<T, kPack>(std::make_integer_sequence<int, kTileRows>{}),
    kernels_by_rows<T, kSwiglu>(std::make_integer_sequence<int, kTileRows>{}),
    kernels_by_rows<T, kSwigluPack>(std::make_integer_sequence<int, kTileRows>{}),
    kernels_by_rows<T, kSwigluGrad>(std::make_integer_sequence<int, kTileRows>{})};

int64_t tiles_of(int64_t cols) {
  return (cols + kTileCols - 1) / kTileCols;
}
// Packed steps for a reduction of `depth` (an odd bf16 depth packs a zero second element).
template <class T>
int64_t step_slots(int64_t depth) {
  return (depth + kPerStep<T> - 1) / kPerStep<T>;
}

// r[i] dword c -> r[c] dword i.
inline void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Now lane l of r[4i + j] holds dword 4l + j of rows 4i .. 4i + 3.
  for (int j = 0; j < 4; ++j) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88),
                  u1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i u3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
    t[4 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// src (cols, depth) row-major, ld apart, reduction along each row (a weight read transposed)
// -> panel (tiles, step_slots, 2): 16 steps of 16 columns are 16 dwords of 16 rows, transposed.
template <class T>
void pack_transposed(const T* src, int64_t ld, int64_t depth, int64_t cols, __m512i* panel) {
  const int64_t slots = step_slots<T>(depth);
  for (int64_t t = 0; t < tiles_of(cols); ++t) {
    __m512i* dst = panel + t * slots * 2;
    for (int64_t s0 = 0; s0 < slots; s0 += 16) {
      const int64_t block_steps = std::min<int64_t>(16, slots - s0);
      for (int half = 0; half < 2; ++half) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          const int64_t col = t * kTileCols + (kPerStep<T> == 2 ? column_of_lane(half, i) : half * 16 + i);
          const T* row = src + col * ld + kPerStep<T> * s0;
          if (col >= cols)
            r[i] = _mm512_setzero_si512();
          else if constexpr (kPerStep<T> == 2)
            r[i] = _mm512_maskz_loadu_epi16(first_elements(depth - 2 * s0), row);
          else
            r[i] = _mm512_castps_si512(_mm512_maskz_loadu_ps(low16(first_elements(depth - s0)), row));
        }
        transpose_16x16(r);
        for (int64_t q = 0; q < block_steps; ++q) _mm512_store_si512(dst + 2 * (s0 + q) + half, r[q]);
      }
    }
  }
}

// A rectangle of a row-major operand.
template <class T>
struct Rect {
  const T* origin;
  int64_t rows, cols, ld;
};

template <class T>
Prefetch whole_rect(const Rect<T>& r) {
  if (!r.origin || r.rows <= 0 || r.cols <= 0) return {};
  const int64_t bytes = int64_t(sizeof(T)), lines = (r.cols * bytes + 63) / 64;
  return {reinterpret_cast<const char*>(r.origin), r.ld * bytes, lines, 0, r.rows * lines};
}

template <class T>
T* grown(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// One 64-byte vector's storage (std::vector<__m512i> would drop the type's alignment attribute).
struct alignas(64) VectorSlot {
  std::byte bytes[64];
};
__m512i* grown(std::vector<VectorSlot>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return reinterpret_cast<__m512i*>(v.data());
}

struct ThreadBuffers {
  std::vector<VectorSlot> panel;
  std::vector<float> partial;
  std::vector<VectorSlot> swiglu_stage;
};
ThreadBuffers& thread_buffers() {
  static thread_local ThreadBuffers buffers;
  return buffers;
}

// Columns [begin, end) of `cols` for thread t of n, in whole units (tiles of 32, or SwiGLU's 16).
std::pair<int64_t, int64_t> column_slice(int64_t cols, int t, int n, int64_t unit = kTileCols) {
  const int64_t units = (cols + unit - 1) / unit;
  return {std::min(cols, units * t / n * unit), std::min(cols, units * (t + 1) / n * unit)};
}

// One (column panel x reduction block) of a group: the weights to pack and where its products go.
template <class T>
struct Panel {
  int64_t e;
  Rect<T> raw;       // the weights as stored (SwiGLU: the gate's)
  Rect<T> raw_up;    // SwiGLU: the up projection's weights (same shape), else origin nullptr
  bool transposed;   // raw is (cols, depth) instead of (depth, cols)
  StepRows<T> a;     // the activations' steps for this block's reduction
  bool first, last;  // first / last reduction block of its column panel
  int64_t out_col;   // first output column
  int64_t depth() const { return transposed ? raw.cols : raw.rows; }
  int64_t cols() const { return transposed ? raw.rows : raw.cols; }
};

// nn_swiglu's epilogue: g (rows, M) of the group, the routing weights of its rows, whether h is kept.
// With `stage` (a stream), the tiles of a row block write h and g there, (kTileRows, kStageLd) as
// [gate | up | g] of kStageCols each, and whole lines of them go out after the row block.
template <class T>
struct SwigluOut {
  T* g = nullptr;
  int64_t M = 0;
  const float* row_weight = nullptr;
  bool keep_h = true;
  T* stage = nullptr;
};
constexpr int64_t kStageCols = kPanelCols / 2, kStageLd = 3 * kStageCols;

// nt_swiglu_grad's epilogue: h (rows, 2M) = [gate | up] of the group, laid out as the output dh, and
// the routing weights of its rows.
template <class T>
struct SwigluGrad {
  const T* h = nullptr;
  const float* row_weight = nullptr;
};

// n elements from src to dst: whole aligned 64-byte lines with non-temporal stores, the ends masked.
template <class T>
void stream_row(T* dst, const T* src, int64_t n) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  for (int64_t i = 0; i < n;) {
    const int64_t len =
        std::min<int64_t>(n - i, (64 - (reinterpret_cast<uintptr_t>(dst + i) & 63)) / int64_t(sizeof(T)));
    if (len == kLine)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
    else if constexpr (kLine == 32)
      _mm512_mask_storeu_epi16(dst + i, first_elements(len),
                               _mm512_maskz_loadu_epi16(first_elements(len), src + i));
    else
      _mm512_mask_storeu_ps(dst + i, low16(first_elements(len)),
                            _mm512_maskz_loadu_ps(low16(first_elements(len)), src + i));
    i += len;
  }
}

// A row block's staged SwiGLU outputs (`rows` rows, `cols` gate columns) -> h (ld apart, up M columns
// after gate) and g (M apart).
template <class T>
void flush_swiglu_stage(const T* stage, int64_t rows, int64_t cols, T* h, int64_t ld, T* g, int64_t M,
                        bool keep_h) {
  for (int64_t m = 0; m < rows; ++m) {
    const T* row = stage + m * kStageLd;
    if (keep_h) {
      stream_row(h + m * ld, row, cols);
      stream_row(h + m * ld + M, row + kStageCols, cols);
    }
    stream_row(g + m * M, row + 2 * kStageCols, cols);
  }
}

// Where a tile (rows from r0, output columns from oc, stage columns from stage_col) leaves its sums: at the
// panel's last reduction block the output, through SwiGLU's epilogue (a split panel: h, g, or the stage)
// or its gradient's (dgate, dup from grad.h); before it, the partial sums.
template <class T>
void aim_tile(TileJob<T>& j, bool last, int64_t r0, int64_t oc, int64_t stage_col, bool split, float* sums,
              int64_t sums_ld, void* out, int64_t out_ld, bool out_bf16, bool stream,
              const SwigluOut<T>& swiglu, const SwigluGrad<T>& grad) {
  if (!last) {
    j.out = sums;
    j.out_ld = sums_ld;
    j.out_bf16 = false;
    return;
  }
  j.out = out_bf16 ? static_cast<void*>(static_cast<bf16_t*>(out) + r0 * out_ld + oc)
                   : static_cast<void*>(static_cast<float*>(out) + r0 * out_ld + oc);
  j.out_ld = out_ld;
  j.out_bf16 = out_bf16;
  j.stream = stream && !split;
  if (split) {
    j.g = swiglu.g + r0 * swiglu.M + oc;
    j.g_ld = swiglu.M;
    j.up_offset = swiglu.M;
    j.row_weight = swiglu.row_weight ? swiglu.row_weight + r0 : nullptr;
    j.keep_h = swiglu.keep_h;
    if (swiglu.stage) {
      j.out = swiglu.stage + stage_col;
      j.out_ld = kStageLd;
      j.up_offset = kStageCols;
      j.g = swiglu.stage + 2 * kStageCols + stage_col;
      j.g_ld = kStageLd;
    }
  }
  if (grad.h) {
    j.h = grad.h + r0 * out_ld + oc;
    j.up_offset = out_ld / 2;
    j.row_weight = grad.row_weight ? grad.row_weight + r0 : nullptr;
  }
}

// Multiplies one panel over the group's live rows, packing it first: a weight read transposed in a
// pass of its own, one with the reduction along its rows by the first row block on the way (its
// loads and shuffles then hide under the arithmetic). `next` (and `next_up`) are prefetched meanwhile.
// A SwiGLU panel's tiles hold 16 output columns each, gate and up side by side.
// bf16 SwiGLU tiles pack whole lines of 32 gate and 32 up columns, their own and the next tile's;
// float32 tiles' 16 columns are a whole line.
template <class T>
void multiply_panel(const Panel<T>& pn, int64_t rows, __m512i* packed, void* out, int64_t out_ld,
                    bool out_bf16, bool accumulate, bool stream, float* partial, Prefetch next,
                    Prefetch next_up, const SwigluOut<T>& swiglu, const SwigluGrad<T>& grad) {
  constexpr bool kPairs = kPerStep<T> == 2;
  const bool split = pn.raw_up.origin != nullptr;
  const int64_t tile_out_cols = split ? kTileCols / 2 : kTileCols;
  const int64_t tiles = (pn.cols() + tile_out_cols - 1) / tile_out_cols;
  if (pn.transposed) pack_transposed(pn.raw.origin, pn.raw.ld, pn.depth(), pn.cols(), packed);
  const int64_t slots = step_slots<T>(pn.depth());
  const int64_t row_blocks = (rows + kTileRows - 1) / kTileRows;
  // The first row block packs (its demand loads need the fill buffers): the others prefetch, each
  // stream on every tile (one stream) or every other (two).
  const int64_t prefetching = (pn.transposed || row_blocks == 1 ? row_blocks : row_blocks - 1) * tiles;
  const int64_t per_stream_tiles = split ? std::max<int64_t>(1, prefetching / 2) : prefetching;
  const int64_t per_tile = (next.count + per_stream_tiles - 1) / per_stream_tiles;
  const int64_t per_tile_up = (next_up.count + per_stream_tiles - 1) / per_stream_tiles;
  int64_t call = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r = std::min<int64_t>(kTileRows, rows - r0);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t c0 = t * kTileCols;                   // in the packed panel and the partial sums
      const int64_t oc = pn.out_col + t * tile_out_cols;  // in the output
      TileJob<T> j;
      j.a = {pn.a.base + r0 * pn.a.row_ld, pn.a.row_ld, pn.a.step_ld};
      j.panel = packed + t * slots * 2;
      j.steps = pn.depth() / kPerStep<T>;
      j.odd = pn.depth() % kPerStep<T> != 0;
      j.cols = std::min(tile_out_cols, pn.cols() - t * tile_out_cols);
      // A SwiGLU tile of even index packs the next one too (whole lines).
      const bool pack = r0 == 0 && !pn.transposed && (!split || !kPairs || t % 2 == 0);
      j.raw = pn.raw.origin + t * tile_out_cols;
      j.raw_up = split ? pn.raw_up.origin + t * tile_out_cols : nullptr;
      j.raw_ld = pn.raw.ld;
      j.raw_cols =
          first_elements(split && kPairs ? std::min(kTileCols, pn.cols() - t * tile_out_cols) : j.cols);
      j.next_tile = split && kPairs && t + 1 < tiles ? slots * 2 : 0;
      // Partial sums between a column panel's reduction blocks stay in `partial`, which its next block
      // reads from L2, also for a float32 output: through the output they went to memory and back
      // (nt 1024 x 2048 x 1024 per group, float32 out: 69.5-71.4 -> 68.3-69.3 ms).
      float* sums = partial + r0 * kMaxPanelCols + c0;
      const int64_t sums_ld = kMaxPanelCols;
      j.in = pn.first ? (accumulate ? static_cast<const float*>(out) + r0 * out_ld + oc : nullptr) : sums;
      j.in_ld = pn.first ? out_ld : sums_ld;
      aim_tile(j, pn.last, r0, oc, t * tile_out_cols, split, sums, sums_ld, out, out_ld, out_bf16, stream,
               swiglu, grad);
      if (!(pack && row_blocks > 1))
        j.ahead = split && call++ % 2 == 1 ? take_lines(next_up, per_tile_up) : take_lines(next, per_tile);
      const TileMode mode = split               ? (pack ? kSwigluPack : kSwiglu)
                            : grad.h && pn.last ? kSwigluGrad
                            : pack              ? kPack
                                                : kMultiply;
      kTileKernels<T>[mode][r - 1](j);
    }
    if (split && pn.last && swiglu.stage)
      flush_swiglu_stage(swiglu.stage, r, pn.cols(), static_cast<T*>(out) + r0 * out_ld + pn.out_col, out_ld,
                         swiglu.g + r0 * swiglu.M + pn.out_col, swiglu.M, swiglu.keep_h);
  }
  prefetch_lines(next, next.count);
  prefetch_lines(next_up, next_up.count);
}

// A panel whose weights hold the reduction along their rows (`raw` is depth x cols): reduction block
// [k, k + depth) of Kd, activations lhs_rows (rows, Kd).
template <class T>
Panel<T> row_panel(int64_t e, Rect<T> raw, Rect<T> raw_up, const T* lhs_rows, int64_t Kd, int64_t k,
                   int64_t out_col) {
  return {e, raw, raw_up, false, {lhs_rows + k, Kd, kPerStep<T>}, k == 0, k + raw.rows == Kd, out_col};
}

// The panels thread t of n computes for group e, in order. nn: out columns are the weight parts side
// by side, reduction Kd. nt: out columns Kd, reduction over the parts' columns.
template <class T, class Emit>
void for_each_panel_nn(int64_t e, int64_t row0, const T* lhs, ExpertWeights rhs, int64_t Kd, int64_t N, int t,
                       int n, Emit emit) {
  const int64_t part_cols = N / rhs.parts();
  const auto [c_begin, c_end] = column_slice(part_cols, t, n);
  for (int p = 0; p < rhs.parts(); ++p) {
    const T* w = static_cast<const T*>(rhs.part(p)) + e * Kd * part_cols;  // (Kd, part_cols)
    for (int64_t c = c_begin; c < c_end; c += kNnPanelCols<T>) {
      const int64_t cols = std::min(kNnPanelCols<T>, c_end - c);
      for (int64_t k = 0; k < Kd; k += kPanelDepth) {
        const int64_t depth = std::min(kPanelDepth, Kd - k);
        emit(row_panel<T>(e, {w + k * part_cols + c, depth, cols, part_cols}, {}, lhs + row0 * Kd, Kd, k,
                          p * part_cols + c));
      }
    }
  }
}

template <class T, class Emit>
void for_each_panel_nt(int64_t e, int64_t row0, const T* dout, ExpertWeights rhs, int64_t Kd, int64_t N,
                       int t, int n, Emit emit) {
  const int64_t part_cols = N / rhs.parts();
  const auto [c_begin, c_end] = column_slice(Kd, t, n);
  for (int64_t c = c_begin; c < c_end; c += kPanelCols) {
    const int64_t cols = std::min(kPanelCols, c_end - c);
    for (int p = 0; p < rhs.parts(); ++p) {
      const T* w = static_cast<const T*>(rhs.part(p)) + e * Kd * part_cols;  // (Kd, part_cols)
      for (int64_t k = 0; k < part_cols; k += kPanelDepth) {
        const int64_t depth = std::min(kPanelDepth, part_cols - k);
        emit(Panel<T>{e,
                      {w + c * part_cols + k, cols, depth, part_cols},
                      {},
                      true,
                      {dout + row0 * N + p * part_cols + k, N, kPerStep<T>},
                      p == 0 && k == 0,
                      p + 1 == rhs.parts() && k + depth == part_cols,
                      c});
      }
    }
  }
}

// nn_swiglu: out columns are h's gate columns [0, M) (each with its up column M apart), reduction Kd.
template <class T, class Emit>
void for_each_panel_swiglu(int64_t e, int64_t row0, const T* lhs, ExpertWeights rhs, int64_t Kd, int64_t N,
                           int t, int n, Emit emit) {
  const int64_t M = N / 2, ld = rhs.parts() == 2 ? M : N;
  const T* gate = static_cast<const T*>(rhs.part(0)) + e * Kd * ld;  // (Kd, ld)
  const T* up = rhs.parts() == 2 ? static_cast<const T*>(rhs.part(1)) + e * Kd * ld : gate + M;
  const auto [c_begin, c_end] = column_slice(M, t, n, kTileCols / 2);
  for (int64_t c = c_begin; c < c_end; c += kPanelCols / 2) {
    const int64_t cols = std::min(kPanelCols / 2, c_end - c);
    for (int64_t k = 0; k < Kd; k += kPanelDepth) {
      const int64_t depth = std::min(kPanelDepth, Kd - k);
      emit(row_panel<T>(e, {gate + k * ld + c, depth, cols, ld}, {up + k * ld + c, depth, cols, ld},
                        lhs + row0 * Kd, Kd, k, c));
    }
  }
}

int64_t largest_live_group(GroupedShape groups) {
  int64_t most = 0;
  for (int64_t e = 0; e < groups.experts; ++e) most = std::max(most, group_rows(groups, e).live);
  return most;
}

struct Start {  // (vectors of this namespace's types only: docs/design.md, "ISA levels")
  int64_t at;
};
// Every panel of a call, thread by thread (its column slices of every group in order), in units of a
// column panel's reduction blocks (a thread sums one unit's panels in its partial sums), each thread's units
// its share (WorkShares: a thread done with its share takes units another has left).
template <class T>
struct PanelUnits {
  std::vector<Panel<T>> panels;
  std::vector<Start> unit_start;  // unit u's panels [unit_start[u], unit_start[u + 1])
  WorkShares shares;              // of units
};

template <class T, class ForEachPanel>
PanelUnits<T> panel_units(const T* lhs, ExpertWeights rhs, GroupedShape groups, int64_t Kd, int64_t N,
                          int threads, ForEachPanel for_each_panel) {
  PanelUnits<T> w{{}, {}, WorkShares(threads)};
  for (int t = 0; t < threads; ++t) {
    const int64_t first_unit = int64_t(w.unit_start.size());
    for (int64_t e = 0; e < groups.experts; ++e) {
      const GroupRows g = group_rows(groups, e);
      if (g.live > 0)
        for_each_panel(e, g.row0, lhs, rhs, Kd, N, t, threads, [&](const Panel<T>& p) {
          if (p.first) w.unit_start.push_back({int64_t(w.panels.size())});
          w.panels.push_back(p);
        });
    }
    w.shares.set(t, first_unit, int64_t(w.unit_start.size()));
  }
  w.unit_start.push_back({int64_t(w.panels.size())});
  return w;
}

// nn and nt: every thread walks its panels of every group, packing each and multiplying it while the
// next one's raw lines stream in, then takes units other threads have left.
template <class T, class ForEachPanel>
void grouped_by_panels(const GemmThresholds& k, void* out, Dtype out_dtype, const T* lhs, ExpertWeights rhs,
                       GroupedShape groups, int64_t Kd, int64_t N, int64_t out_cols, bool accumulate,
                       ForEachPanel for_each_panel, SwigluOut<T> swiglu = {}, SwigluGrad<T> grad = {}) {
  const int threads = omp_get_max_threads();
  const bool out_bf16 = out_dtype == Dtype::bf16;
  const int64_t rows = groups.experts > 0 ? groups.group_offset[groups.experts] : 0;
  const bool stream = rows * out_cols * int64_t(dtype_size(out_dtype)) >= k.dpbf16_stream_bytes;
  const int64_t most_rows = largest_live_group(groups);  // the partial sums' rows
  PanelUnits<T> w = panel_units(lhs, rhs, groups, Kd, N, threads, for_each_panel);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    ThreadBuffers& buf = thread_buffers();
    __m512i* packed = grown(buf.panel, kMaxPanelBytes / 64);
    float* partial = grown(buf.partial, most_rows * kMaxPanelCols);
    T* stage = swiglu.g && stream ? reinterpret_cast<T*>(grown(
                                        buf.swiglu_stage, kTileRows * kStageLd * int64_t(sizeof(T)) / 64 + 1))
                                  : nullptr;
    // Panel pn of its group, the next one's raw lines (if any) streaming in meanwhile.
    auto run_panel = [&](const Panel<T>& pn, const Panel<T>* after) {
      const GroupRows g = group_rows(groups, pn.e);
      SwigluOut<T> group_swiglu = swiglu;
      if (swiglu.g) {
        group_swiglu.stage = stage;
        group_swiglu.g = swiglu.g + g.row0 * swiglu.M;
        group_swiglu.row_weight = swiglu.row_weight ? swiglu.row_weight + g.row0 : nullptr;
      }
      SwigluGrad<T> group_grad = grad;
      if (grad.h) {
        group_grad.h = grad.h + g.row0 * out_cols;
        group_grad.row_weight = grad.row_weight ? grad.row_weight + g.row0 : nullptr;
      }
      multiply_panel(pn, g.live, packed, at(out, g.row0 * out_cols, out_dtype), out_cols, out_bf16,
                     accumulate, stream, partial, after ? whole_rect(after->raw) : Prefetch{},
                     after ? whole_rect(after->raw_up) : Prefetch{}, group_swiglu, group_grad);
    };
    // The next unit is taken before this one runs, so the panel prefetched at this one's end is surely
    // this thread's.
    for (int64_t u = w.shares.next(t), next_unit = 0; u >= 0; u = next_unit) {
      next_unit = w.shares.next(t);
      const int64_t end = w.unit_start[size_t(u) + 1].at;
      for (int64_t i = w.unit_start[size_t(u)].at; i < end; ++i) {
        const int64_t after = i + 1 < end ? i + 1 : next_unit >= 0 ? w.unit_start[size_t(next_unit)].at : -1;
        run_panel(w.panels[size_t(i)], after >= 0 ? &w.panels[size_t(after)] : nullptr);
      }
    }
    _mm_sfence();  // the non-temporal stores are seen by every thread after the region's barrier
  }
  // Padding rows (all rows of an empty group) are written as zeros, accumulating or not.
  for (int64_t e = 0; e < groups.experts; ++e) {
    if (!swiglu.g || swiglu.keep_h) zero_padding_rows(out, out_dtype, group_rows(groups, e), out_cols);
    if (swiglu.g) zero_padding_rows(swiglu.g, out_dtype, group_rows(groups, e), swiglu.M);
  }
}

// tn reads its broadcast operand, lhs^T, in row blocks of kTnRows out of blocks of 16 of its rows.
constexpr int kTnRows = 8;
constexpr int64_t kTnBlock = 16;

// Columns [32 t0, 32 t1) of lhs rows [0, live) of a group (live, Kd) -> steps of rows (bf16: pairs of
// rows) as dwords, in blocks of 16 columns: dword (s, k) at (k / 16 * step_slots(live) + s) * 16 + k % 16,
// so a row block of tn's output reads one short run per step, and packing stores whole vectors.
void pack_lhs_transposed(const bf16_t* lhs, int64_t live, int64_t Kd, int64_t t0, int64_t t1, bf16_t* dst) {
  const int64_t slots = step_slots<bf16_t>(live);
  auto* out = reinterpret_cast<PairVector*>(dst);
  for (int64_t p = 0; p < slots; ++p) {
    for (int64_t t = t0; t < t1; ++t) {
      const __mmask32 mask = first_elements(Kd - t * kTileCols);
      const bf16_t* s = lhs + 2 * p * Kd + t * kTileCols;
      const __m512i r0 = _mm512_maskz_loadu_epi16(mask, s);
      const __m512i r1 = 2 * p + 1 < live ? _mm512_maskz_loadu_epi16(mask, s + Kd) : _mm512_setzero_si512();
      const __m512i lo = _mm512_unpacklo_epi16(r0, r1), hi = _mm512_unpackhi_epi16(r0, r1);
      out[(2 * t * slots + p)] = PairVector(_mm512_permutex2var_epi32(lo, columns_from_lanes(0), hi));
      out[((2 * t + 1) * slots + p)] = PairVector(_mm512_permutex2var_epi32(lo, columns_from_lanes(1), hi));
    }
  }
}
// One or two weight gradients of the same lhs (dw1 and dw3 from x and dh's halves: lhs^T is packed
// once, with one barrier per group, for both). bf16 only: float32's tn is oneDNN's (ours above).
struct TnOutputs {
  int count;
  void* drhs[2];
  const bf16_t* dout[2];
};
// tn's units of a group: (output q, `group_tiles` tiles of thread s's column slice), slice by slice, so that
// thread s's share is its slice's units (WorkShares: a thread done with its share takes units another left).
struct TnUnit {
  int64_t c_begin, c_end;  // the slice's columns
  int q;
  int64_t t0, t1;  // its tiles, from c_begin
};
int64_t tn_slice_units(int64_t N, int s, int n, int count, int64_t group_tiles) {
  const auto [c_begin, c_end] = column_slice(N, s, n);
  return count * ((tiles_of(c_end - c_begin) + group_tiles - 1) / group_tiles);
}
void set_tn_shares(WorkShares& shares, int64_t N, int n, int threads, int count, int64_t group_tiles) {
  int64_t first = 0;
  for (int s = 0; s < threads; ++s) {
    const int64_t units = s < n ? tn_slice_units(N, s, n, count, group_tiles) : 0;
    shares.set(s, first, first + units);
    first += units;
  }
}
TnUnit tn_unit(int64_t u, int64_t N, int n, int count, int64_t group_tiles) {
  int s = 0;
  for (int64_t units; u >= (units = tn_slice_units(N, s, n, count, group_tiles)); ++s) u -= units;
  const auto [c_begin, c_end] = column_slice(N, s, n);
  const int64_t groups = (tiles_of(c_end - c_begin) + group_tiles - 1) / group_tiles;
  const int64_t t0 = u % groups * group_tiles;
  return {c_begin, c_end, int(u / groups), t0, std::min(tiles_of(c_end - c_begin), t0 + group_tiles)};
}

// One unit of a group's tn (xt its packed lhs^T, `slots` steps): its dout tiles packed by the first row block
// of the gradient on the way (their loads and shuffles hide under the arithmetic), then every row block
// written across them: whole row runs, where panel by panel wrote short runs a power-of-two stride apart
// (N = 2048: 0.5 TF/s against 0.85). A unit's tiles are a group whose packed dout stays in L2 while all row
// blocks read it (1024 rows: a tile's is 64 KiB; all of a thread's, 1 MiB, came from L3 for every row block).
void run_tn_unit(const TnUnit& unit, const TnOutputs& outs, Dtype out_dtype, bool stream, int64_t e,
                 const GroupRows& g, const bf16_t* xt, int64_t slots, __m512i* packed, int64_t Kd, int64_t N,
                 int64_t ld_dout) {
  using T = bf16_t;
  void* dw = at(outs.drhs[unit.q], e * Kd * N, out_dtype);  // (Kd, N)
  const bf16_t* dy = outs.dout[unit.q];
  const int64_t cols = unit.c_end - unit.c_begin;
  for (int64_t r0 = 0; r0 < Kd; r0 += kTnRows) {
    const int64_t r = std::min<int64_t>(kTnRows, Kd - r0);
    for (int64_t t0 = unit.t0; t0 < unit.t1; ++t0) {
      TileJob<T> j;
      j.a = {xt + kPerStep<T> * (r0 / kTnBlock * slots * kTnBlock + r0 % kTnBlock), kPerStep<T>,
             kPerStep<T> * kTnBlock};
      j.panel = packed + (t0 - unit.t0) * slots * 2;
      j.steps = g.live / kPerStep<T>;
      j.odd = g.live % kPerStep<T> != 0;  // lhs^T's last pair holds a zero second element, not read
      j.cols = std::min(kTileCols, cols - t0 * kTileCols);
      j.in = nullptr;
      j.in_ld = 0;
      j.raw = dy + g.row0 * ld_dout + unit.c_begin + t0 * kTileCols;  // (live, cols) ld_dout apart
      j.raw_ld = ld_dout;
      j.raw_cols = first_elements(j.cols);
      j.ahead = {};
      j.out = at(dw, r0 * N + unit.c_begin + t0 * kTileCols, out_dtype);
      j.out_ld = N;
      j.out_bf16 = out_dtype == Dtype::bf16;
      j.stream = stream;
      kTileKernels<T>[r0 == 0 ? kPack : kMultiply][r - 1](j);
    }
  }
}

void tn_by_tiles(const GemmThresholds& k, const TnOutputs& outs, Dtype out_dtype, const bf16_t* x,
                 GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  using T = bf16_t;
  const bool stream =
      outs.count * groups.experts * Kd * N * int64_t(dtype_size(out_dtype)) >= k.dpbf16_stream_bytes;
  // Every thread reads all of a group's lhs^T (threads split the gradient's columns), so they pack it
  // once, each a share of its tiles, into one of two shared buffers, alternating by group: a thread may
  // pack the next group's while another still reads this one's, with one barrier per group (each
  // thread packing all of it cost 10-15 % at 1024 rows). The group's units go out by one of two work
  // shares, alternating as the buffers: thread 0 sets a group's before its barrier, when every thread has
  // passed the barrier of the group before, so none takes from the group before that any more.
  const int64_t xt_vectors =
      2 * tiles_of(Kd) * step_slots<T>(largest_live_group(groups));  // (2 x tiles, slots)
  static thread_local std::vector<VectorSlot> shared_lhs;  // the calling thread's, shared by the team
  __m512i* const xt_buffers = grown(shared_lhs, 2 * xt_vectors);
  const int threads = omp_get_max_threads();
  WorkShares shares[2] = {WorkShares(threads), WorkShares(threads)};
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    ThreadBuffers& buf = thread_buffers();
    int64_t live_groups = 0;
    for (int64_t e = 0; e < groups.experts; ++e) {
      const GroupRows g = group_rows(groups, e);
      if (g.live == 0) {
        // An expert no row reached has a zero gradient: each thread streams its share.
        for (int q = 0; q < outs.count; ++q)
          stream_zeros(at(outs.drhs[q], e * Kd * N, out_dtype), size_t(Kd * N) * dtype_size(out_dtype), t, n);
        continue;
      }
      const int64_t slots = step_slots<T>(g.live);
      const int64_t group_tiles = std::max<int64_t>(1, k.dpbf16_tn_group_bytes / (slots * 2 * 64));
      WorkShares& units = shares[live_groups % 2];
      // (2 x tiles, slots, 16) dwords, 64-byte aligned
      T* xt = reinterpret_cast<T*>(xt_buffers + live_groups++ % 2 * xt_vectors);
      pack_lhs_transposed(x + g.row0 * Kd, g.live, Kd, tiles_of(Kd) * t / n, tiles_of(Kd) * (t + 1) / n, xt);
      if (t == 0) set_tn_shares(units, N, n, threads, outs.count, group_tiles);
#pragma omp barrier
      __m512i* packed = grown(buf.panel, group_tiles * slots * 2);
      for (int64_t u = units.next(t); u >= 0; u = units.next(t))
        run_tn_unit(tn_unit(u, N, n, outs.count, group_tiles), outs, out_dtype, stream, e, g, xt, slots,
                    packed, Kd, N, ld_dout);
    }
    _mm_sfence();
  }
}

}  // namespace

// Each entry point runs only calls supports() accepts (the kernel table asks it first and runs the next
// row, oneDNN's, for the rest): nothing is delegated behind the row's back.
void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  check_groups(groups, Kd, N);
  if (in_dtype == Dtype::f32)
    return grouped_by_panels(k, out, out_dtype, static_cast<const float*>(lhs), rhs, groups, Kd, N, N, false,
                             [](auto&&... args) { for_each_panel_nn<float>(args...); });
  grouped_by_panels(k, out, out_dtype, static_cast<const bf16_t*>(lhs), rhs, groups, Kd, N, N, false,
                    [](auto&&... args) { for_each_panel_nn<bf16_t>(args...); });
}

void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h) {
  check_groups(groups, Kd, 2 * M);
  if (in_dtype == Dtype::f32)
    return grouped_by_panels(
        k, h, out_dtype, static_cast<const float*>(lhs), rhs, groups, Kd, 2 * M, 2 * M, false,
        [](auto&&... args) { for_each_panel_swiglu<float>(args...); },
        SwigluOut<float>{static_cast<float*>(g), M, row_weight, keep_h});
  grouped_by_panels(
      k, h, out_dtype, static_cast<const bf16_t*>(lhs), rhs, groups, Kd, 2 * M, 2 * M, false,
      [](auto&&... args) { for_each_panel_swiglu<bf16_t>(args...); },
      SwigluOut<bf16_t>{static_cast<bf16_t*>(g), M, row_weight, keep_h});
}

void grouped_gemm_nt(const GemmThresholds& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  check_groups(groups, Kd, N);
  if (in_dtype == Dtype::f32)
    return grouped_by_panels(k, out, out_dtype, static_cast<const float*>(dout), rhs, groups, Kd, N, Kd,
                             accumulate, [](auto&&... args) { for_each_panel_nt<float>(args...); });
  grouped_by_panels(k, out, out_dtype, static_cast<const bf16_t*>(dout), rhs, groups, Kd, N, Kd, accumulate,
                    [](auto&&... args) { for_each_panel_nt<bf16_t>(args...); });
}

void grouped_gemm_nt_swiglu_grad(const GemmThresholds& k, void* dh, void* dg, const void* dout,
                                 ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups,
                                 int64_t M, int64_t N, const float* row_weight) {
  check_groups(groups, M, N);
  if (dtype == Dtype::f32)
    return grouped_by_panels(
        k, dh, dtype, static_cast<const float*>(dout), rhs, groups, M, N, 2 * M, false,
        [](auto&&... args) { for_each_panel_nt<float>(args...); }, SwigluOut<float>{},
        SwigluGrad<float>{static_cast<const float*>(h), row_weight});
  grouped_by_panels(
      k, dh, dtype, static_cast<const bf16_t*>(dout), rhs, groups, M, N, 2 * M, false,
      [](auto&&... args) { for_each_panel_nt<bf16_t>(args...); }, SwigluOut<bf16_t>{},
      SwigluGrad<bf16_t>{static_cast<const bf16_t*>(h), row_weight});
}

void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  check_groups(groups, Kd, N);
  tn_by_tiles(k, {1, {drhs, nullptr}, {static_cast<const bf16_t*>(dout), nullptr}}, out_dtype,
              static_cast<const bf16_t*>(lhs), groups, Kd, N, ld_dout);
}

void grouped_gemm_tn_pair(const GemmThresholds& k, void* drhs_first, void* drhs_second, Dtype out_dtype,
                          const void* lhs, const void* dout_first, const void* dout_second, Dtype in_dtype,
                          GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  check_groups(groups, Kd, N);
  tn_by_tiles(k,
              {2,
               {drhs_first, drhs_second},
               {static_cast<const bf16_t*>(dout_first), static_cast<const bf16_t*>(dout_second)}},
              out_dtype, static_cast<const bf16_t*>(lhs), groups, Kd, N, ld_dout);
}

}  // namespace moe::cpu::isa_avx512_bf16::dpbf16

#pragma GCC pop_options

// Called on any CPU (--list, the registry): build-ISA code.
namespace moe::dpbf16 {

std::string gemm_library_version() {
  return "moe-bench AVX-512 BF16 micro-kernel";
}

// What the kernels above compute; the table runs the next row (oneDNN's) for the rest.
std::string supports(const GemmCall& call, const GemmThresholds& k) {
  if (std::string why = gemm_detail::float_operands(call); !why.empty()) return why;
  if (call.form == GemmForm::dense) return "no dense kernel (the block's groups only)";
  if (call.rows > k.dpbf16_max_group_rows)
    return "a group of " + std::to_string(call.rows) + " rows, above dpbf16_max_group_rows " +
           std::to_string(k.dpbf16_max_group_rows);
  const bool empty_reduction = (call.form == GemmForm::nn || call.form == GemmForm::nn_swiglu) ? call.Kd == 0
                               : (call.form == GemmForm::nt || call.form == GemmForm::nt_swiglu_grad)
                                   ? call.N == 0
                                   : false;
  if (empty_reduction) return "an empty reduction";
  if (call.in_dtype == Dtype::bf16) {
    if (call.form == GemmForm::nn_swiglu && call.out_dtype != Dtype::bf16)
      return "bfloat16 inputs with a float32 SwiGLU output";
    return "";
  }
  if (call.out_dtype != Dtype::f32) return "float32 inputs with a bfloat16 output";
  switch (call.form) {
    case GemmForm::nn:
    case GemmForm::nt:
    case GemmForm::nt_swiglu_grad:
      return "";
    case GemmForm::nn_swiglu:
      return call.rows >= k.dpbf16_min_f32_swiglu_rows ? ""
                                                       : "float32 groups under dpbf16_min_f32_swiglu_rows " +
                                                             std::to_string(k.dpbf16_min_f32_swiglu_rows);
    case GemmForm::tn:
    case GemmForm::tn_pair:
      return "float32 weight gradients (oneDNN's measured faster)";
    case GemmForm::dense:
    case GemmForm::nn_s8:  // float_operands refused these above
    case GemmForm::nn_s8_swiglu:
      break;
  }
  return "no dense kernel";
}

std::string unavailable() {
  return gemm_detail::needs_isa(IsaLevel::avx512_bf16, "AVX-512 BF16");
}

bool bf16_arithmetic() {
  return true;
}

bool same_sums_on_any_thread_count() {
  return true;
}

// On AMX, oneDNN's AMX brgemm is faster: the reference shape, bf16, 16 threads of an Emerald Rapids Xeon
// (2026-11-26): forward 0.68 TF/s here against 2.59 through oneDNN, forward_backward 0.69 against 2.73. So
// auto's order without measurements (--tuning-file none, or a call it cannot measure) puts it last there.
bool auto_candidate() {
  return isa_level() < IsaLevel::amx;
}

}  // namespace moe::dpbf16

#endif
