// cpu/gemm/gemm.h's grouped forms (nn, nn_swiglu, nt, nt_swiglu_grad, tn) on our own AVX2 + FMA micro-kernel:
// float32 arithmetic for float32 and bfloat16 storage. oneDNN 2.6 has no bf16 matmul below AVX-512, so
// before this variant a bf16 run on an AVX2 CPU widened each operand to float32 in a pass of its own, ran
// oneDNN's float32 matmul and rounded its result in another pass. Here bf16 is widened where the
// kernel's operands are staged anyway (issue 24 item 3): the weights while a panel is packed, the
// activations of a row block while they are transposed into a step-major buffer in L1 that every tile of
// the panel reads; results are rounded in the tile's epilogue.
//
// Layout and work (BLIS's loop order, sized for Zen 3: 32 KiB L1d, 512 KiB L2 a core):
//  - register tile: kTileRows (6) rows x kTileCols (16) columns, 12 accumulators of 8 floats; each
//    reduction step loads two vectors of packed weights and broadcasts one float per row from the
//    step-major activations (a step's 6 floats in one line; rows read where they lie, 4 KiB apart at
//    Kd = 1024, would share L1 sets);
//  - each thread owns a fixed slice of the output columns across every group (dpbf16's split): no
//    barriers, and each weight byte is packed by one thread (once per pass of rows). A thread's panel is
//    as many of its columns as the avx2_panel_cols threshold allows; where the partial sums of a group's
//    rows over it would pass their budget, the rows go in passes (each packing the panel again) when
//    they outnumber the columns, else the panel narrows (each panel staging the rows again): whichever
//    repeats less work. Per reduction block of kPanelDepth steps the panel's weights are packed into
//    16-column tiles (per step 16 floats, zeros past the panel's columns; weights read transposed (nt) by
//    8 x 8 transposes);
//  - the output rows go by chunks of kChunkRows: a chunk's activations are staged once for the whole
//    panel (L2), then each weight tile (16 KiB, L1) meets every row block of the chunk in one call of the
//    tile kernel. Before, a row block's activations were staged in L1 once per 256 columns and every
//    tile streamed from L2: on Zen 3, whose two 256-bit FMA pipes need a weight line every 6 cycles, that
//    cost the tile 10-20 %;
//  - sums across a panel's reduction blocks stay in a per-thread float32 scratch (pass_rows x panel
//    columns), fetched back during a tile's last steps; a bf16 output is rounded once, to nearest
//    even (NaN stays NaN, as f32_to_bf16);
//  - nn_swiglu's tiles hold 8 gate and the same 8 up columns, so SwiGLU runs on the tile's sums (h
//    rounded as stored first); nt_swiglu_grad's tile rounds dg as stored and reads h to write dh.
// tn (weight gradients) is nn with lhs read transposed: its output rows are lhs's columns, its reduction
// the group's rows, dout's rows packed as the weights.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/work_shares.h"
#include "cpu/gemm/zero_gradient.h"
#include "moe/cpu_isa.h"
#include "moe/tensor.h"

namespace moe::avx2 {

constexpr int kTileRows = 6;
constexpr int64_t kTileCols = 16;
constexpr int64_t kPanelDepth = 256;
// A panel's columns: as many as its thread has, up to the avx2_panel_cols threshold, and within
// kPartialBudget floats of partial sums over a pass of rows (at least kPanelCols columns where the panel
// narrows): a chunk of rows' activations are staged once for all of them.
constexpr int64_t kPanelCols = 256;
constexpr int64_t kPartialBudget = int64_t(4) << 20;  // floats a thread, 16 MiB
// Rows staged at once: their activations (kChunkRows x kPanelDepth floats, step-major by row block: 64
// KiB) stay in L2 while each 16-column weight tile, in L1, meets all of them.
constexpr int64_t kChunkRows = 48;
// A row block's staged activations: per reduction step, the block's 6 rows (written 8 floats at a time in
// step order, each store's last 2 overwritten by the next; kStepSlack floats past the buffer's end take
// the last one's).
constexpr int64_t kStepStride = kTileRows;
constexpr int64_t kStepSlack = 8;

// One grouped GEMM in the kernel's terms, laid out by the build-ISA entry points (no library template
// is instantiated in the AVX2 code below, docs/design.md "ISA levels").
enum class Form { nn, nn_swiglu, nt, tn, dense };
struct Call {
  Form form;
  bool bf16_in, bf16_out, accumulate;
  bool bf16_b, trans_a, trans_b;  // dense: b's dtype when not the input's, a stored (Kd, R), b (N, Kd)
  const void* lhs;                // nn: (rows, Kd); nt: dout (rows, N); tn: (rows, Kd); dense: a
  const void* rhs[2];  // nn, nt: the weight parts (E, Kd, part_cols); tn: dout (rows, ld_dout); dense: b
  int parts;
  void* out;      // nn: (rows, N); nn_swiglu: h (rows, 2M); nt: (rows, Kd); tn: (E, Kd, N); dense: (R, N)
  void* g;        // nn_swiglu: (rows, M), M = N / 2
  const void* h;  // nt as nt_swiglu_grad: h (rows, 2M) = [gate | up], M = Kd; out is dh (rows, 2M)
  const float* row_weight;  // nn_swiglu, nt_swiglu_grad: (rows) or nullptr
  bool keep_h;              // nn_swiglu: h is written
  const int64_t* group_offset;
  const int64_t* live_rows;  // or nullptr
  int64_t experts, Kd, N, ld_dout;
  int64_t pass_rows;   // a group's output rows taken at once (the partial sums' rows), kChunkRows x n
  int64_t panel_cols;  // a panel's columns, a multiple of kTileCols (nn_swiglu: h's)
};

// Per-thread buffers, sized by the build-ISA entry point before the parallel region.
struct ThreadScratch {
  float* packed;   // kPanelDepth x panel_cols
  float* lhs;      // kChunkRows / kTileRows blocks of kPanelDepth x kStepStride: activations, step-major
  float* partial;  // pass_rows x panel_cols
};

}  // namespace moe::avx2

// Everything from here to pop_options is AVX2 code, whatever the build's -march (docs/design.md, "ISA
// levels"); the registry runs it only where isa_level() reaches avx2.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#include <immintrin.h>

#define MOE_TARGET_AVX2 1
#include "cpu/ops/vec_math.h"

namespace moe::cpu::isa_avx2 {
namespace {

using avx2::Call;
using avx2::Form;
using avx2::kChunkRows;
using avx2::kPanelCols;
using avx2::kPanelDepth;
using avx2::kStepStride;
using avx2::kTileCols;
using avx2::kTileRows;
using avx2::ThreadScratch;

inline int64_t smaller(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// 8 bf16 -> 8 floats (exact).
inline __m256 widen8(const bf16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// Qualified: where -march has AVX-512 BF16, vec_math.h's bf16_to_f32(__m256i) would hide the scalar one.
inline float widen1(bf16_t v) {
  return moe::bf16_to_f32(v);
}

// 8 floats of p (float32 or bf16 storage).
template <class T>
inline __m256 load8(const T* p) {
  if constexpr (sizeof(T) == 4)
    return _mm256_loadu_ps(p);
  else
    return widen8(p);
}
template <class T>
inline float load1(const T* p) {
  if constexpr (sizeof(T) == 4)
    return *p;
  else
    return widen1(*p);
}

// sigmoid(z) of 8 floats: 1 / (1 + exp(-z)), exp as vec_math.h's exp_approx (Cody-Waite reduction, degree-7
// Taylor polynomial, ~2 ulp on its clamped range).
inline __m256 sigmoid8(__m256 z) {
  __m256 x = _mm256_sub_ps(_mm256_setzero_ps(), z);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i scale =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
  const __m256 sig = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  // A NaN z stays NaN (the clamps above would have made it a number).
  return _mm256_blendv_ps(sig, z, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
}

// ---- the micro-kernel ------------------------------------------------------------------------------------

struct TileJob {
  // Row blocks of the tile's rows, one after another: a block's activations a_block_floats further on,
  // its rows' outputs (and partial sums, g, h, row weights) the tile's rows further down.
  int blocks;
  int64_t a_block_floats;
  const float* a;  // row i, step s at a[i + s * a_step_ld]: a step's rows adjacent
  int64_t a_step_ld;
  const float* b;  // (depth, 16) packed
  int64_t depth;
  const float* in;  // sums to start from (in_ld apart, in_cols of them), or nullptr
  int64_t in_ld, in_cols;
  void* out;  // float32 or bf16 (out_bf16), out_ld apart
  int64_t out_ld;
  bool out_bf16;
  int64_t cols;  // columns of out (and in) that exist: 1..16 (SwiGLU: gate columns, 1..8)
  // SwiGLU (g non-null): the tile's 16 columns are 8 gate and the same 8 up columns of h; out is h's
  // gate columns (up_offset further on: the up ones), written when keep_h, and g = silu(gate) * up *
  // row_weight[r] from h's values as stored.
  void* g;
  int64_t g_ld, up_offset;
  const float* row_weight;
  bool keep_h;
  // SwiGLU's backward (h non-null): the tile's sums are dg (rounded as a stored dg is); h's gate and up
  // columns (out_ld apart, up at up_offset) give dh's, written to out (up_offset further on: dup).
  const void* h;
};

inline __m256 widen_lanes(__m128i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// Stores (or loads) the first `cols` of 16 floats through a full-width buffer.
inline void store_cols(float* dst, __m256 lo, __m256 hi, int64_t cols) {
  if (cols == kTileCols) {
    _mm256_storeu_ps(dst, lo);
    _mm256_storeu_ps(dst + 8, hi);
    return;
  }
  alignas(32) float tmp[kTileCols];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(dst, tmp, size_t(cols) * sizeof(float));
}
inline void load_cols(const float* src, __m256& lo, __m256& hi, int64_t cols) {
  if (cols == kTileCols) {
    lo = _mm256_loadu_ps(src);
    hi = _mm256_loadu_ps(src + 8);
    return;
  }
  alignas(32) float tmp[kTileCols] = {};
  std::memcpy(tmp, src, size_t(cols) * sizeof(float));
  lo = _mm256_load_ps(tmp);
  hi = _mm256_load_ps(tmp + 8);
}

// The first n (<= 16) elements of a row of 16 (float32 or bf16) as floats, and back.
inline void load16(const void* src, bool bf16, int64_t n, __m256& lo, __m256& hi) {
  if (!bf16) return load_cols(static_cast<const float*>(src), lo, hi, n);
  alignas(32) bf16_t tmp[kTileCols] = {};
  if (n < kTileCols) {
    std::memcpy(tmp, src, size_t(n) * sizeof(bf16_t));
    src = tmp;
  }
  const __m256i v = _mm256_loadu_si256(static_cast<const __m256i*>(src));
  lo = widen_lanes(_mm256_castsi256_si128(v));
  hi = widen_lanes(_mm256_extracti128_si256(v, 1));
}
inline void store16(void* dst, bool bf16, int64_t n, __m256 lo, __m256 hi) {
  if (!bf16) return store_cols(static_cast<float*>(dst), lo, hi, n);
  if (n == kTileCols) return _mm256_storeu_si256(static_cast<__m256i*>(dst), bf16_of_16(lo, hi));
  alignas(32) bf16_t tmp[kTileCols];
  _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), bf16_of_16(lo, hi));
  std::memcpy(dst, tmp, size_t(n) * sizeof(bf16_t));
}

// lo and hi as a bf16 output stores them: rounded to bf16 and widened back.
inline void round_trip16(__m256& lo, __m256& hi) {
  const __m256i v = bf16_of_16(lo, hi);
  lo = widen_lanes(_mm256_castsi256_si128(v));
  hi = widen_lanes(_mm256_extracti128_si256(v, 1));
}

// The first n (<= 8) of 8 floats to dst (float32, or bf16 rounded to nearest even).
inline void store8(void* dst, bool bf16, int64_t n, __m256 v) {
  alignas(32) std::byte tmp[32];
  const size_t bytes = size_t(n) * (bf16 ? sizeof(bf16_t) : sizeof(float));
  void* to = n == 8 ? dst : tmp;
  if (bf16)
    _mm_storeu_si128(static_cast<__m128i*>(to), _mm256_castsi256_si128(bf16_of_16(v, _mm256_setzero_ps())));
  else
    _mm256_storeu_ps(static_cast<float*>(to), v);
  if (to == tmp) std::memcpy(dst, tmp, bytes);
}

// SwiGLU's epilogue of one row: h's gate and up (as h stores them), g from those.
inline void swiglu_row(const TileJob& j, int r, __m256 gate, __m256 up) {
  if (j.out_bf16) round_trip16(gate, up);
  const size_t elem = j.out_bf16 ? sizeof(bf16_t) : sizeof(float);
  if (j.keep_h) {
    std::byte* h = static_cast<std::byte*>(j.out) + size_t(r * j.out_ld) * elem;
    store8(h, j.out_bf16, j.cols, gate);
    store8(h + size_t(j.up_offset) * elem, j.out_bf16, j.cols, up);
  }
  const float w = j.row_weight ? j.row_weight[r] : 1.0f;
  const __m256 g = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(gate, sigmoid8(gate)), up), _mm256_set1_ps(w));
  store8(static_cast<std::byte*>(j.g) + size_t(r * j.g_ld) * elem, j.out_bf16, j.cols, g);
}

// SwiGLU's backward of one row: dg (the tile's sums) and h's gate and up -> dh's dgate and dup, as
// swiglu_backward computes them.
inline void swiglu_grad_row(const TileJob& j, int r, __m256 dg_lo, __m256 dg_hi) {
  if (j.out_bf16) round_trip16(dg_lo, dg_hi);  // dg as stored
  const size_t elem = j.out_bf16 ? sizeof(bf16_t) : sizeof(float);
  const std::byte* h = static_cast<const std::byte*>(j.h) + size_t(r * j.out_ld) * elem;
  std::byte* dh = static_cast<std::byte*>(j.out) + size_t(r * j.out_ld) * elem;
  __m256 gate[2], up[2], dgate[2], dup[2];
  load16(h, j.out_bf16, j.cols, gate[0], gate[1]);
  load16(h + size_t(j.up_offset) * elem, j.out_bf16, j.cols, up[0], up[1]);
  const __m256 w = _mm256_set1_ps(j.row_weight ? j.row_weight[r] : 1.0f);
  const __m256 dgw[2] = {_mm256_mul_ps(dg_lo, w), _mm256_mul_ps(dg_hi, w)};
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int i = 0; i < 2; ++i) {
    // dgw * up * s * (1 + gate * (1 - s)), dgw * gate * s
    const __m256 sg = sigmoid8(gate[i]);
    dgate[i] = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dgw[i], up[i]), sg),
                             _mm256_fmadd_ps(gate[i], _mm256_sub_ps(one, sg), one));
    dup[i] = _mm256_mul_ps(_mm256_mul_ps(dgw[i], gate[i]), sg);
  }
  store16(dh, j.out_bf16, j.cols, dgate[0], dgate[1]);
  store16(dh + size_t(j.up_offset) * elem, j.out_bf16, j.cols, dup[0], dup[1]);
}

template <int Rows>
void tile_block(const TileJob& j) {
  __m256 acc[Rows][2];
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* a = j.a;
  const float* b = j.b;
  const int64_t step_ld = j.a_step_ld, depth = j.depth;
  // The partial sums this tile adds to arrive while it multiplies its last kPrefetchSteps steps (sooner,
  // the weights and activations streaming through L1 would evict them first).
  constexpr int64_t kPrefetchSteps = 64;
  auto steps = [&](int64_t count) {
#pragma GCC unroll 2
    for (int64_t s = 0; s < count; ++s) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
      }
      a += step_ld;
      b += kTileCols;
    }
  };
  // The next row block's partial sums (the next tile job's, a chunk's row blocks going in turn) start
  // their way to L2 now; a prefetch never faults, so past the last row it costs nothing.
  if (j.in)
#pragma GCC unroll 8
    for (int r = 0; r < kTileRows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(j.in + (Rows + r) * j.in_ld), _MM_HINT_T1);
  const int64_t early = depth > kPrefetchSteps ? depth - kPrefetchSteps : 0;
  steps(early);
  if (j.in)
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(j.in + r * j.in_ld), _MM_HINT_T0);
  steps(depth - early);
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    if (j.in) {
      __m256 lo, hi;
      load_cols(j.in + r * j.in_ld, lo, hi, j.in_cols);
      acc[r][0] = _mm256_add_ps(acc[r][0], lo);
      acc[r][1] = _mm256_add_ps(acc[r][1], hi);
    }
    if (j.g) {
      swiglu_row(j, r, acc[r][0], acc[r][1]);
    } else if (j.h) {
      swiglu_grad_row(j, r, acc[r][0], acc[r][1]);
    } else if (j.out_bf16) {
      bf16_t* o = static_cast<bf16_t*>(j.out) + r * j.out_ld;
      const __m256i v = bf16_of_16(acc[r][0], acc[r][1]);
      if (j.cols == kTileCols) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), v);
      } else {
        alignas(32) bf16_t tmp[kTileCols];
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
        std::memcpy(o, tmp, size_t(j.cols) * sizeof(bf16_t));
      }
    } else {
      store_cols(static_cast<float*>(j.out) + r * j.out_ld, acc[r][0], acc[r][1], j.cols);
    }
  }
}

// The tile over its row blocks: a call per block cost a tenth of the tile's time in setting the job up and
// in the call (256 steps of 12 FMAs are ~1500 cycles).
template <int Rows>
void tile_kernel(const TileJob& job) {
  TileJob j = job;
  const size_t elem = j.out_bf16 ? sizeof(bf16_t) : sizeof(float);
  for (int block = 0; block < job.blocks; ++block) {
    tile_block<Rows>(j);
    j.a += j.a_block_floats;
    if (j.in) j.in += Rows * j.in_ld;
    j.out = static_cast<std::byte*>(j.out) + size_t(Rows * j.out_ld) * elem;
    if (j.g) j.g = static_cast<std::byte*>(j.g) + size_t(Rows * j.g_ld) * elem;
    if (j.h) j.h = static_cast<const std::byte*>(j.h) + size_t(Rows * j.out_ld) * elem;
    if (j.row_weight) j.row_weight += Rows;
  }
}

using TileKernel = void (*)(const TileJob&);
constexpr TileKernel kTileKernels[kTileRows] = {&tile_kernel<1>, &tile_kernel<2>, &tile_kernel<3>,
                                                &tile_kernel<4>, &tile_kernel<5>, &tile_kernel<6>};

// ---- packing --------------------------------------------------------------------------------------------

// The weights of a panel: step s, column c at raw[s * ld + c] (or raw[c * ld + s] when transposed).
// SwiGLU's (up non-null): raw is the gate's weights, up the up projection's (same ld), a tile 8 of each.
template <class T>
struct RawPanel {
  const T* raw;
  int64_t ld;
  bool transposed;
  int64_t depth, cols;
  const T* up = nullptr;
};

// In-register transpose of 8 rows of 8 floats.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The panel -> tiles of (depth, 16) floats, tile t at packed + t * depth * 16. Weights stored step-major
// (not transposed) are read a step's row at a time, in order, which the hardware prefetchers follow; a
// tile at a time read one line from each of `depth` rows, each on its own page at N >= 1024 floats.
template <class T>
void pack_panel(const RawPanel<T>& p, float* packed) {
  if (p.up) {
    constexpr int64_t kHalf = kTileCols / 2;
    const int64_t tiles = (p.cols + kHalf - 1) / kHalf, full = p.cols / kHalf;
    for (int64_t s = 0; s < p.depth; ++s) {
      const T* gate = p.raw + s * p.ld;
      const T* up = p.up + s * p.ld;
      for (int64_t t = 0; t < full; ++t) {
        float* dst = packed + (t * p.depth + s) * kTileCols;
        _mm256_store_ps(dst, load8(gate + t * kHalf));
        _mm256_store_ps(dst + kHalf, load8(up + t * kHalf));
      }
    }
    for (int64_t t = full; t < tiles; ++t) {
      float* dst = packed + t * p.depth * kTileCols;
      const int64_t c0 = t * kHalf, cols = p.cols - c0;
      for (int64_t s = 0; s < p.depth; ++s)
        for (int64_t c = 0; c < kHalf; ++c) {
          dst[s * kTileCols + c] = c < cols ? load1(p.raw + s * p.ld + c0 + c) : 0.0f;
          dst[s * kTileCols + kHalf + c] = c < cols ? load1(p.up + s * p.ld + c0 + c) : 0.0f;
        }
    }
    return;
  }
  const int64_t tiles = (p.cols + kTileCols - 1) / kTileCols;
  int64_t first_tile = 0;
  if (!p.transposed) {
    first_tile = p.cols / kTileCols;
    for (int64_t s = 0; s < p.depth; ++s) {
      const T* src = p.raw + s * p.ld;
      for (int64_t t = 0; t < first_tile; ++t) {
        float* dst = packed + (t * p.depth + s) * kTileCols;
        _mm256_store_ps(dst, load8(src + t * kTileCols));
        _mm256_store_ps(dst + 8, load8(src + t * kTileCols + 8));
      }
    }
  }
  for (int64_t t = first_tile; t < tiles; ++t) {
    float* dst = packed + t * p.depth * kTileCols;
    const int64_t c0 = t * kTileCols, cols = smaller(kTileCols, p.cols - c0);
    int64_t s0 = 0;
    if (p.transposed && cols == kTileCols) {
      for (; s0 + 8 <= p.depth; s0 += 8)
        for (int64_t half = 0; half < 2; ++half) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = load8(p.raw + (c0 + half * 8 + i) * p.ld + s0);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (s0 + i) * kTileCols + half * 8, r[i]);
        }
    }
    for (int64_t s = s0; s < p.depth; ++s)
      for (int64_t c = 0; c < kTileCols; ++c)
        dst[s * kTileCols + c] =
            c < cols ? load1(p.transposed ? p.raw + (c0 + c) * p.ld + s : p.raw + s * p.ld + c0 + c) : 0.0f;
  }
}

// ---- a panel over a group's output rows ------------------------------------------------------------------

// The activations of a panel: output row i, reduction step s at base[i * row_ld + s * step_ld].
template <class T>
struct Activations {
  const T* base;
  int64_t row_ld, step_ld;
};

// The float32 activations of rows [r0, r0 + rows), step-major in `buf` (kStepStride floats a step: a
// step's broadcasts read one line or two adjacent), widened from bf16 on the way: by 8 x 8 transposes where a
// row's steps are adjacent (nn, nt: rows a power of two bytes apart would share L1 sets if read where they
// lie), by a step's adjacent rows otherwise (tn).
template <class T>
void row_block(const Activations<T>& a, int64_t r0, int rows, int64_t depth, int64_t out_rows, float* buf) {
  const T* base = a.base + r0 * a.row_ld;
  if (a.step_ld == 1) {
    int64_t s = 0;
    for (; s + 8 <= depth; s += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < rows ? load8(base + i * a.row_ld + s) : _mm256_setzero_ps();
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(buf + (s + i) * kStepStride, r[i]);
    }
    for (; s < depth; ++s)
      for (int i = 0; i < rows; ++i) buf[s * kStepStride + i] = load1(base + i * a.row_ld + s);
    return;
  }
  // Steps s of 8 adjacent rows: one 8-element load where the 8 exist (r0 + 8 <= out_rows). Read where
  // they lie, each step's 6 floats would be a line of their own, thrashing L1 with the packed weights.
  for (int64_t s = 0; s < depth; ++s) {
    const T* src = base + s * a.step_ld;
    if (r0 + 8 <= out_rows)
      _mm256_storeu_ps(buf + s * kStepStride, load8(src));
    else
      for (int i = 0; i < rows; ++i) buf[s * kStepStride + i] = load1(src + i * a.row_ld);
  }
}

// A run of the reduction: weights (its whole depth) and the activations they meet. nt's reduction spans
// w13's two parts, a segment each.
template <class TA, class TB>
struct Segment {
  RawPanel<TB> w;
  Activations<TA> a;
};

// A column panel over a group's output rows [0, out_rows): its segments' weights, out's column out_col on.
template <class TA, class TB = TA>
struct Panel {
  Segment<TA, TB> seg[2];
  int segments;
  int64_t out_col;
};

// SwiGLU's outputs of a group: g (rows, M), or its backward's input h (rows, 2M), and the routing
// weights of its rows.
struct SwigluOut {
  void* g = nullptr;
  const void* h = nullptr;
  const float* row_weight = nullptr;
};

// Rows [r0, r0 + 6) and tile t of a reduction block: the staged activations at a, the packed weights at
// b. The panel's first reduction block starts from zero (or the output, accumulating), later ones from
// the partial sums; the last writes the output.
struct TilePlace {
  int64_t pass_r0, r0, t;  // the pass's first row, the block's
  const float* a;
  const float* b;
  int64_t depth;
  bool first, last;
};

template <class TA, class TB>
TileJob tile_job(const Call& c, const Panel<TA, TB>& pn, const TilePlace& at, void* out, int64_t out_ld,
                 const ThreadScratch& buf, const SwigluOut& swiglu) {
  const RawPanel<TB>& w = pn.seg[0].w;
  const int64_t tile_out_cols = w.up ? kTileCols / 2 : kTileCols;
  const int64_t oc = pn.out_col + at.t * tile_out_cols, r0 = at.r0;
  float* sums = buf.partial + (r0 - at.pass_r0) * c.panel_cols + at.t * kTileCols;
  TileJob j;
  j.a = at.a;
  j.a_step_ld = kStepStride;
  j.b = at.b;
  j.depth = at.depth;
  j.cols = smaller(tile_out_cols, w.cols - at.t * tile_out_cols);
  j.g = nullptr;
  j.h = nullptr;
  j.row_weight = nullptr;
  if (at.first) {
    j.in = c.accumulate ? static_cast<const float*>(out) + r0 * out_ld + oc : nullptr;
    j.in_ld = out_ld;
    j.in_cols = j.cols;
  } else {
    j.in = sums;
    j.in_ld = c.panel_cols;
    j.in_cols = kTileCols;  // the scratch's tiles are whole
  }
  if (!at.last) {
    j.out = sums;
    j.out_ld = c.panel_cols;
    j.out_bf16 = false;
    j.cols = kTileCols;  // the scratch's tiles are whole
    return j;
  }
  const size_t elem = c.bf16_out ? sizeof(bf16_t) : sizeof(float);
  j.out = static_cast<std::byte*>(out) + size_t(r0 * out_ld + oc) * elem;
  j.out_ld = out_ld;
  j.out_bf16 = c.bf16_out;
  if (swiglu.g) {
    const int64_t M = c.N / 2;
    j.g = static_cast<std::byte*>(swiglu.g) + size_t(r0 * M + oc) * elem;
    j.g_ld = M;
    j.up_offset = M;
    j.row_weight = swiglu.row_weight ? swiglu.row_weight + r0 : nullptr;
    j.keep_h = c.keep_h;
  }
  if (swiglu.h) {
    j.h = static_cast<const std::byte*>(swiglu.h) + size_t(r0 * out_ld + oc) * elem;
    j.up_offset = c.Kd;
    j.row_weight = swiglu.row_weight ? swiglu.row_weight + r0 : nullptr;
  }
  return j;
}

// The reduction block [k, k + depth) of a segment.
template <class T>
RawPanel<T> weights_at(const RawPanel<T>& w, int64_t k, int64_t depth) {
  RawPanel<T> sub = w;
  sub.raw = w.transposed ? w.raw + k : w.raw + k * w.ld;
  if (w.up) sub.up = w.up + k * w.ld;
  sub.depth = depth;
  return sub;
}

// The panel over rows [0, out_rows) in BLIS's loop order: per pass of rows, each reduction block of its
// weights packed once; per chunk of rows, the block's activations staged once for all the panel's
// columns (L2), then each weight tile (L1) meets every row block of the chunk.
template <class TA, class TB>
void multiply_panel(const Call& c, const Panel<TA, TB>& pn, int64_t out_rows, void* out, int64_t out_ld,
                    const ThreadScratch& buf, const SwigluOut& swiglu = {}) {
  const int64_t tile_out_cols = pn.seg[0].w.up ? kTileCols / 2 : kTileCols;
  const int64_t tiles = (pn.seg[0].w.cols + tile_out_cols - 1) / tile_out_cols;
  const int last_seg = pn.segments - 1;
  for (int64_t pass = 0; pass < out_rows; pass += c.pass_rows) {
    const int64_t pass_end = smaller(out_rows, pass + c.pass_rows);
    for (int s = 0; s < pn.segments; ++s) {
      const Segment<TA, TB>& seg = pn.seg[s];
      for (int64_t k = 0; k < seg.w.depth; k += kPanelDepth) {
        const int64_t depth = smaller(kPanelDepth, seg.w.depth - k), block_floats = depth * kStepStride;
        pack_panel(weights_at(seg.w, k, depth), buf.packed);
        const Activations<TA> a{seg.a.base + k * seg.a.step_ld, seg.a.row_ld, seg.a.step_ld};
        TilePlace at{.pass_r0 = pass,
                     .r0 = 0,
                     .t = 0,
                     .a = nullptr,
                     .b = nullptr,
                     .depth = depth,
                     .first = s == 0 && k == 0,
                     .last = s == last_seg && k + depth == seg.w.depth};
        for (int64_t chunk = pass; chunk < pass_end; chunk += kChunkRows) {
          const int64_t chunk_end = smaller(pass_end, chunk + kChunkRows);
          for (int64_t r0 = chunk; r0 < chunk_end; r0 += kTileRows)
            row_block(a, r0, int(smaller(kTileRows, out_rows - r0)), depth, out_rows,
                      buf.lhs + (r0 - chunk) / kTileRows * block_floats);
          // Rows [r0, r0 + blocks * rows) of the chunk, `rows` a block, in one call of the tile kernel.
          auto run_blocks = [&](int64_t r0, int blocks, int rows) {
            at.r0 = r0;
            at.a = buf.lhs + (r0 - chunk) / kTileRows * block_floats;
            TileJob j = tile_job(c, pn, at, out, out_ld, buf, swiglu);
            j.blocks = blocks;
            j.a_block_floats = block_floats;
            kTileKernels[rows - 1](j);
          };
          const int whole = int((chunk_end - chunk) / kTileRows), rest = int((chunk_end - chunk) % kTileRows);
          for (at.t = 0; at.t < tiles; ++at.t) {
            at.b = buf.packed + at.t * depth * kTileCols;
            if (whole > 0) run_blocks(chunk, whole, kTileRows);
            if (rest > 0) run_blocks(chunk + whole * kTileRows, 1, rest);
          }
        }
      }
    }
  }
}

// Columns [begin, end) of `cols` for thread t of n, in whole tiles.
inline void column_slice(int64_t cols, int t, int n, int64_t& begin, int64_t& end, int64_t unit = kTileCols) {
  const int64_t tiles = (cols + unit - 1) / unit;
  begin = smaller(cols, tiles * t / n * unit);
  end = smaller(cols, tiles * (t + 1) / n * unit);
}

// Expert e's rows (row0, `live` of them) for thread t of n, one function per form: the thread's columns of
// the output (tn: of the weight gradient), panel by panel.
template <class T>
void run_nn(const Call& c, int64_t e, int64_t row0, int64_t live, int t, int n, const ThreadScratch& buf) {
  const T* lhs = static_cast<const T*>(c.lhs);
  const int64_t part_cols = c.N / c.parts;
  int64_t begin, end;
  column_slice(part_cols, t, n, begin, end);
  void* out = c.bf16_out ? static_cast<void*>(static_cast<bf16_t*>(c.out) + row0 * c.N)
                         : static_cast<void*>(static_cast<float*>(c.out) + row0 * c.N);
  for (int p = 0; p < c.parts; ++p) {
    const T* w = static_cast<const T*>(c.rhs[p]) + e * c.Kd * part_cols;  // (Kd, part_cols)
    for (int64_t col = begin; col < end; col += c.panel_cols) {
      const int64_t cols = smaller(c.panel_cols, end - col);
      const Panel<T> pn{
          {{{w + col, part_cols, false, c.Kd, cols}, {lhs + row0 * c.Kd, c.Kd, 1}}}, 1, p * part_cols + col};
      multiply_panel(c, pn, live, out, c.N, buf);
    }
  }
}

// h's gate columns [0, M), each with its up column M further on, reduction Kd.
template <class T>
void run_nn_swiglu(const Call& c, int64_t e, int64_t row0, int64_t live, int t, int n,
                   const ThreadScratch& buf) {
  const T* lhs = static_cast<const T*>(c.lhs);
  const int64_t M = c.N / 2, ld = c.parts == 2 ? M : c.N;
  const T* gate = static_cast<const T*>(c.rhs[0]) + e * c.Kd * ld;  // (Kd, ld)
  const T* up = c.parts == 2 ? static_cast<const T*>(c.rhs[1]) + e * c.Kd * ld : gate + M;
  int64_t begin, end;
  column_slice(M, t, n, begin, end, kTileCols / 2);
  const size_t elem = c.bf16_out ? sizeof(bf16_t) : sizeof(float);
  void* h = static_cast<std::byte*>(c.out) + size_t(row0 * c.N) * elem;
  const SwigluOut swiglu{.g = static_cast<std::byte*>(c.g) + size_t(row0 * M) * elem,
                         .row_weight = c.row_weight ? c.row_weight + row0 : nullptr};
  for (int64_t col = begin; col < end; col += c.panel_cols / 2) {
    const int64_t cols = smaller(c.panel_cols / 2, end - col);
    const Panel<T> pn{
        {{{gate + col, ld, false, c.Kd, cols, up + col}, {lhs + row0 * c.Kd, c.Kd, 1}}}, 1, col};
    multiply_panel(c, pn, live, h, c.N, buf, swiglu);
  }
}

// nt, and nt_swiglu_grad, whose out is dh (rows, 2 Kd), its dg columns the gate's.
template <class T>
void run_nt(const Call& c, int64_t e, int64_t row0, int64_t live, int t, int n, const ThreadScratch& buf) {
  const T* lhs = static_cast<const T*>(c.lhs);
  const int64_t part_cols = c.N / c.parts;
  int64_t begin, end;
  column_slice(c.Kd, t, n, begin, end);
  const int64_t out_ld = c.h ? 2 * c.Kd : c.Kd;
  const size_t elem = c.bf16_out ? sizeof(bf16_t) : sizeof(float);
  void* out = static_cast<std::byte*>(c.out) + size_t(row0 * out_ld) * elem;
  SwigluOut grad;
  if (c.h) {
    grad.h = static_cast<const std::byte*>(c.h) + size_t(row0 * out_ld) * elem;
    grad.row_weight = c.row_weight ? c.row_weight + row0 : nullptr;
  }
  for (int64_t col = begin; col < end; col += c.panel_cols) {
    const int64_t cols = smaller(c.panel_cols, end - col);
    Panel<T> pn{{}, c.parts, col};
    for (int p = 0; p < c.parts; ++p) {
      const T* w = static_cast<const T*>(c.rhs[p]) + e * c.Kd * part_cols;  // (Kd, part_cols)
      pn.seg[p] = {{w + col * part_cols, part_cols, true, part_cols, cols},
                   {lhs + row0 * c.N + p * part_cols, c.N, 1}};
    }
    multiply_panel(c, pn, live, out, out_ld, buf, grad);
  }
}

// tn: drhs[e] (Kd, N); an expert no row reached has a zero gradient.
template <class T>
void run_tn(const Call& c, int64_t e, int64_t row0, int64_t live, int t, int n, const ThreadScratch& buf) {
  const T* lhs = static_cast<const T*>(c.lhs);
  int64_t begin, end;
  column_slice(c.N, t, n, begin, end);
  const size_t elem = c.bf16_out ? sizeof(bf16_t) : sizeof(float);
  void* out = static_cast<std::byte*>(c.out) + size_t(e * c.Kd * c.N) * elem;
  if (live == 0) return gemm_detail::stream_zeros(out, size_t(c.Kd * c.N) * elem, t, n);  // slice t's share
  const T* dout = static_cast<const T*>(c.rhs[0]);
  for (int64_t col = begin; col < end; col += c.panel_cols) {
    const int64_t cols = smaller(c.panel_cols, end - col);
    const Panel<T> pn{
        {{{dout + row0 * c.ld_dout + col, c.ld_dout, false, live, cols}, {lhs + row0 * c.Kd, 1, c.Kd}}},
        1,
        col};
    multiply_panel(c, pn, c.Kd, out, c.N, buf);
  }
}

// Thread t's units: (column slice s of n, expert e) as unit s * experts + e, its own slice of every expert
// first, then those of slices other threads have left (gemm_detail::WorkShares).
template <class T>
void run_thread(const Call& c, gemm_detail::WorkShares& shares, int t, int n, const ThreadScratch& buf) {
  for (int64_t u = shares.next(t); u >= 0; u = shares.next(t)) {
    const int s = int(u / c.experts);
    const int64_t e = u % c.experts, row0 = c.group_offset[e];
    const int64_t live = c.live_rows ? c.live_rows[e] : c.group_offset[e + 1] - row0;
    if (c.form == Form::tn)
      run_tn<T>(c, e, row0, live, s, n, buf);
    else if (live == 0)
      continue;
    else if (c.form == Form::nn)
      run_nn<T>(c, e, row0, live, s, n, buf);
    else if (c.form == Form::nn_swiglu)
      run_nn_swiglu<T>(c, e, row0, live, s, n, buf);
    else
      run_nt<T>(c, e, row0, live, s, n, buf);
  }
}

// dense: out (R, N) = a (R, Kd) @ b (Kd, N), a read as (Kd, R) when trans_a, b as (N, Kd) when trans_b;
// a and b may be of different dtypes (the shared expert's float32 activations and run-dtype weights).
template <class TA, class TB>
void run_dense_thread(const Call& c, int t, int n, const ThreadScratch& buf) {
  const TA* a = static_cast<const TA*>(c.lhs);
  const TB* b = static_cast<const TB*>(c.rhs[0]);
  const int64_t R = c.group_offset[1];
  int64_t begin, end;
  column_slice(c.N, t, n, begin, end);
  const Activations<TA> act = c.trans_a ? Activations<TA>{a, 1, R} : Activations<TA>{a, c.Kd, 1};
  for (int64_t col = begin; col < end; col += c.panel_cols) {
    const int64_t cols = smaller(c.panel_cols, end - col);
    const RawPanel<TB> w = c.trans_b ? RawPanel<TB>{b + col * c.Kd, c.Kd, true, c.Kd, cols}
                                     : RawPanel<TB>{b + col, c.N, false, c.Kd, cols};
    multiply_panel(c, Panel<TA, TB>{{{w, act}}, 1, col}, R, c.out, c.N, buf);
  }
}

}  // namespace

void grouped_f32_fma(const Call& c, const ThreadScratch* scratch) {
  const int threads = omp_get_max_threads();
  gemm_detail::WorkShares shares(c.form == Form::dense ? 0 : threads * c.experts, threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    if (c.form == Form::dense) {
      const int n = omp_get_num_threads();
      if (c.bf16_in && c.bf16_b)
        run_dense_thread<bf16_t, bf16_t>(c, t, n, scratch[t]);
      else if (c.bf16_in)
        run_dense_thread<bf16_t, float>(c, t, n, scratch[t]);
      else if (c.bf16_b)
        run_dense_thread<float, bf16_t>(c, t, n, scratch[t]);
      else
        run_dense_thread<float, float>(c, t, n, scratch[t]);
    } else if (c.bf16_in) {
      run_thread<bf16_t>(c, shares, t, threads, scratch[t]);
    } else {
      run_thread<float>(c, shares, t, threads, scratch[t]);
    }
  }
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options

// Build-ISA code: the entry points the kernel table calls and the capability answers.
namespace moe::cpu::isa_avx2 {
void grouped_f32_fma(const avx2::Call& c, const avx2::ThreadScratch* scratch);
}

namespace moe::avx2 {
namespace {

// Per-thread buffers, kept across calls (one caller at a time, like the kernel table).
struct Buffers {
  std::vector<Buffer<float>> packed, lhs, partial;
  std::vector<ThreadScratch> views;
};

void run(Call c, const GemmThresholds& k) {
  const int threads = omp_get_max_threads();
  int64_t most_out_rows = c.form == Form::tn ? c.Kd : 0;
  if (c.form != Form::tn)  // dense: one group of R rows
    for (int64_t e = 0; e < c.experts; ++e)
      most_out_rows =
          std::max(most_out_rows, c.live_rows ? c.live_rows[e] : c.group_offset[e + 1] - c.group_offset[e]);
  // Panels as wide as the thread's columns and avx2_panel_cols allow. Where a group's partial sums over
  // them would pass the budget, a pass of rows repacks the panel's weights (its columns x Kd) and a
  // narrower panel restages the rows' activations (rows x Kd): the rows go in passes where they outnumber
  // the columns (a dense GEMM of 16384 rows), else the panel narrows.
  const int64_t out_cols = c.form == Form::nt ? c.Kd : c.N;
  const int64_t thread_cols = (out_cols + threads - 1) / threads;
  const int64_t widest = std::min(k.avx2_panel_cols, (thread_cols + kTileCols - 1) / kTileCols * kTileCols);
  const int64_t rows = std::max<int64_t>(1, most_out_rows);
  c.panel_cols = widest;
  c.pass_rows = (rows + kChunkRows - 1) / kChunkRows * kChunkRows;
  if (rows * widest > kPartialBudget) {
    if (rows >= widest)
      c.pass_rows = std::max(kChunkRows, kPartialBudget / widest / kChunkRows * kChunkRows);
    else
      c.panel_cols = std::max(
          kTileCols, std::min(widest, std::max(kPanelCols, kPartialBudget / rows / kTileCols * kTileCols)));
  }
  thread_local Buffers b;  // per calling thread: ranks as threads call at once
  if (int(b.views.size()) < threads) {
    b.packed.resize(size_t(threads));
    b.lhs.resize(size_t(threads));
    b.partial.resize(size_t(threads));
    b.views.resize(size_t(threads));
  }
  for (int t = 0; t < threads; ++t) {
    if (b.packed[t].size() < size_t(kPanelDepth * c.panel_cols))
      b.packed[t] = Buffer<float>(size_t(kPanelDepth * c.panel_cols));
    if (b.lhs[t].size() == 0)
      b.lhs[t] = Buffer<float>(size_t(kChunkRows / kTileRows * kPanelDepth * kStepStride + kStepSlack));
    if (b.partial[t].size() < size_t(c.pass_rows * c.panel_cols))
      b.partial[t] = Buffer<float>(size_t(c.pass_rows * c.panel_cols));
    b.views[t] = {b.packed[t].data(), b.lhs[t].data(), b.partial[t].data()};
  }
  cpu::isa_avx2::grouped_f32_fma(c, b.views.data());
}

// The call of a form whose second operand is the weights (nn, nn_swiglu, nt); tn sets its dout.
Call call_of(Form form, Dtype in_dtype, Dtype out_dtype, const void* lhs, ExpertWeights rhs, void* out,
             GroupedShape groups, int64_t Kd, int64_t N) {
  Call c{};
  c.form = form;
  c.bf16_in = in_dtype == Dtype::bf16;
  c.bf16_out = out_dtype == Dtype::bf16;
  c.lhs = lhs;
  c.rhs[0] = rhs.first;
  c.rhs[1] = rhs.second;
  c.parts = rhs.parts();
  c.out = out;
  c.group_offset = groups.group_offset;
  c.live_rows = groups.live_rows;
  c.experts = groups.experts;
  c.Kd = Kd;
  c.N = N;
  return c;
}

}  // namespace

void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  gemm_detail::check_groups(groups, Kd, N);
  run(call_of(Form::nn, in_dtype, out_dtype, lhs, rhs, out, groups, Kd, N), k);
  for (int64_t e = 0; e < groups.experts; ++e)
    gemm_detail::zero_padding_rows(out, out_dtype, gemm_detail::group_rows(groups, e), N);
}

void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h) {
  gemm_detail::check_groups(groups, Kd, 2 * M);
  Call c = call_of(Form::nn_swiglu, in_dtype, out_dtype, lhs, rhs, h, groups, Kd, 2 * M);
  c.g = g;
  c.row_weight = row_weight;
  c.keep_h = keep_h;
  run(c, k);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows rows = gemm_detail::group_rows(groups, e);
    if (keep_h) gemm_detail::zero_padding_rows(h, out_dtype, rows, 2 * M);
    gemm_detail::zero_padding_rows(g, out_dtype, rows, M);
  }
}

void grouped_gemm_nt(const GemmThresholds& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  gemm_detail::check_groups(groups, Kd, N);
  Call c = call_of(Form::nt, in_dtype, out_dtype, dout, rhs, out, groups, Kd, N);
  c.accumulate = accumulate;
  run(c, k);
  for (int64_t e = 0; e < groups.experts; ++e)
    gemm_detail::zero_padding_rows(out, out_dtype, gemm_detail::group_rows(groups, e), Kd);
}

void grouped_gemm_nt_swiglu_grad(const GemmThresholds& k, void* dh, void* /*dg*/, const void* dout,
                                 ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups,
                                 int64_t M, int64_t N, const float* row_weight) {
  gemm_detail::check_groups(groups, M, N);
  Call c = call_of(Form::nt, dtype, dtype, dout, rhs, dh, groups, M, N);
  c.h = h;
  c.row_weight = row_weight;
  run(c, k);
  for (int64_t e = 0; e < groups.experts; ++e)
    gemm_detail::zero_padding_rows(dh, dtype, gemm_detail::group_rows(groups, e), 2 * M);
}

void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  gemm_detail::check_groups(groups, Kd, N);
  Call c = call_of(Form::tn, in_dtype, out_dtype, lhs, ExpertWeights(dout), drhs, groups, Kd, N);
  c.ld_dout = ld_dout;
  run(c, k);
}

void dense_gemm(const GemmThresholds& k, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  MOE_CHECK(R >= 0 && Kd > 0 && N >= 0, "avx2 dense: a non-empty reduction (supports() refuses Kd = 0)");
  const int64_t offsets[2] = {0, R};
  Call c = call_of(Form::dense, a_dtype, out_dtype, a, ExpertWeights(b), out, {offsets, 1}, Kd, N);
  c.bf16_b = b_dtype == Dtype::bf16;
  c.trans_a = trans_a;
  c.trans_b = trans_b;
  run(c, k);
}

std::string gemm_library_version() {
  return "moe-bench AVX2 FMA micro-kernel";
}

std::string unavailable() {
  return gemm_detail::needs_isa(IsaLevel::avx2, "AVX2 and FMA");
}

bool bf16_arithmetic() {
  return false;  // bf16 is widened to float32
}

bool same_sums_on_any_thread_count() {
  return true;  // threads split output columns; each sum's order is fixed
}

// Where AVX-512 kernels run, they come first without measurements; measured auto still times this one.
bool auto_candidate() {
  return isa_level() < IsaLevel::avx512;
}

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  if (std::string why = gemm_detail::float_operands(call); !why.empty()) return why;
  const bool empty_reduction =
      (call.form == GemmForm::nn || call.form == GemmForm::nn_swiglu || call.form == GemmForm::dense)
          ? call.Kd == 0
      : (call.form == GemmForm::nt || call.form == GemmForm::nt_swiglu_grad) ? call.N == 0
                                                                             : false;
  if (empty_reduction) return "an empty reduction";
  switch (call.form) {
    case GemmForm::nn:
    case GemmForm::nn_swiglu:
    case GemmForm::nt:
    case GemmForm::nt_swiglu_grad:
    case GemmForm::tn:
    case GemmForm::tn_pair:
    case GemmForm::dense:
      return "";
    case GemmForm::nn_s8:
    case GemmForm::nn_s8_swiglu:
      break;
  }
  return "no kernel for this form";
}

}  // namespace moe::avx2
