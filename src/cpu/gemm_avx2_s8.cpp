// moe/gemm.h's nn_s8 on our own AVX2 micro-kernel: exact int32 sums of int8 products, then the
// reference's dequantization (src/ref/int8_gemm.cpp) bit for bit. AVX2 has no int8 dot product, and
// oneDNN 2.6's AVX2 int8 GEMM is not exact (its vpmaddubsw saturates, docs/design.md "Kernel table"),
// so this is the int8 GEMM of AVX2 machines.
//
// Exactness: vpmaddubsw multiplies unsigned by signed bytes and adds each pair into an int16 with
// saturation. Operands are symmetric int8 in [-127, 127] (never -128), so with the unsigned side |a| and
// the signed side b with a's sign (vpsignb), a pair sums to at most 2 * 127 * 127 = 32258 < 32767: it
// never saturates. vpmaddwd by ones widens each two int16 into an int32, added into the accumulator
// (vpaddd wraps, so partial sums may leave int32's range as long as the final one does not: the reference
// checks that). 4 instructions per 32 products, 2 of them multiplies; vpmaddwd on sign-extended int16
// pairs is 1 multiply per 16 products, the same multiplier time, and needs twice the bytes of packed
// weights and a widening pass over lhs: the register-resident loops of both ran at the same rate on the
// 2-core EPYC (docs/kernels.md), so this one.
//
// Layout: the weights rhs[e] (Kd, N) are packed per call into 16-column tiles of k-quads: per tile, per
// quad q, 16 dwords, dword j = rhs[4q .. 4q+3][16 t + j] (zeros past Kd and N), two 256-bit vectors. The
// activations are read where they lie: a row's 4 consecutive int8 are one 32-bit broadcast. Register
// tile: kTileRows rows x 16 columns (8 int32 accumulators), over the whole reduction.
// Work: one list of (expert, row block, column block) items that the threads take in turn, so small
// experts do not leave threads idle; a column block's packed weights stay in L2 while its row blocks
// pass, and each 16-column panel in L1 while the block's row tiles pass.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm_variants.h"
#include "moe/cpu_isa.h"
#include "moe/tensor.h"

namespace moe::avx2_s8 {

constexpr int kTileRows = 4;       // 8 accumulators + 2 weight vectors + 2 broadcasts + ones of 16 registers
constexpr int64_t kTileCols = 16;  // two vectors of 8 int32
constexpr int64_t kQuad = 4;       // reduction elements a 32-bit broadcast holds
constexpr int64_t kTileBytesPerQuad = kTileCols * kQuad;
// A work item: kBlockRows x kBlockTiles tiles of one expert's output. Its packed weights (128 columns x
// Kd bytes, 128 KiB at Kd = 1024) stay in L2 across its row tiles, and its rows of lhs across its tiles.
constexpr int64_t kBlockRows = 64;
constexpr int64_t kBlockTiles = 8;

// One call's work, laid out by the build-ISA entry point (no library template is instantiated in the
// AVX2 code below, docs/design.md "ISA levels").
struct Item {
  int64_t e, row0, rows, tile0, tiles;  // rows of the row buffer; 16-column tiles of the output
};
struct PackJob {
  int64_t e, tile;
};
struct Work {
  const Item* items;
  size_t n_items;
  const PackJob* pack_jobs;
  size_t n_pack_jobs;
  const int64_t* packed_at;  // (E): expert e's packed weights in `weights` (bytes), -1 without live rows
  uint8_t* weights;          // the packed weights of every expert with live rows
};

}  // namespace moe::avx2_s8

// Everything from here to pop_options is AVX2 code, whatever the build's -march (docs/design.md, "ISA
// levels"): the headers above were compiled for the build's ISA; the registry runs this only where
// isa_level() reaches avx2.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")

namespace moe::cpu::isa_avx2 {
namespace {

using namespace avx2_s8;  // the layout constants and the work list

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Packs columns [16 t, 16 t + 16) of w (Kd, N) into `dst`: quads (Kd rounded up to 4) x 16 dwords.
void pack_tile(uint8_t* dst, const int8_t* w, int64_t Kd, int64_t N, int64_t t) {
  const int64_t col0 = t * kTileCols, cols = std::min(kTileCols, N - col0);
  const int64_t quads = ceil_div(Kd, kQuad);
  for (int64_t q = 0; q < quads; ++q) {
    uint8_t* d = dst + q * kTileBytesPerQuad;
    if (cols == kTileCols && q * kQuad + kQuad <= Kd) {
      // Four rows of 16 bytes -> 16 columns of 4 bytes: interleave bytes of rows (0,1) and (2,3), then
      // their 16-bit pairs.
      const int8_t* s = w + q * kQuad * N + col0;
      const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + N));
      const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * N));
      const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * N));
      const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
      const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
      auto* o = reinterpret_cast<__m128i*>(d);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(lo01, lo23));  // columns 0-3
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(lo01, lo23));  // 4-7
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(hi01, hi23));  // 8-11
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(hi01, hi23));  // 12-15
      continue;
    }
    for (int64_t j = 0; j < kTileCols; ++j)
      for (int64_t i = 0; i < kQuad; ++i) {
        const int64_t k = q * kQuad + i;
        d[j * kQuad + i] = j < cols && k < Kd ? uint8_t(w[k * N + col0 + j]) : 0;
      }
  }
}

// The 32-bit broadcast of a row's quad q: its 4 int8 (zeros past Kd, which multiply packed zeros).
inline __m256i quad_of(const int8_t* row, int64_t q, int64_t Kd) {
  int32_t v = 0;
  const int64_t k = q * kQuad;
  std::memcpy(&v, row + k, size_t(std::min(kQuad, Kd - k)));
  return _mm256_set1_epi32(v);
}

// acc += the products of one quad: a (a row's quad broadcast) x b (8 columns' quads).
inline __m256i dot_quad(__m256i acc, __m256i a_abs, __m256i a, __m256i b, __m256i ones) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(b, a)), ones));
}

// acc[r] (rows x 16 int32) = lhs rows [0, R) (rows Kd apart) @ one packed 16-column tile.
template <int R>
void tile_sums(__m256i (&acc)[kTileRows][2], const int8_t* lhs, const uint8_t* panel, int64_t Kd) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const int64_t full = Kd / kQuad;
  for (int64_t q = 0; q < full; ++q) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * kTileBytesPerQuad));
    const __m256i b1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * kTileBytesPerQuad + 32));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      int32_t v;
      std::memcpy(&v, lhs + r * Kd + q * kQuad, sizeof v);
      const __m256i a = _mm256_set1_epi32(v), a_abs = _mm256_abs_epi8(a);
      acc[r][0] = dot_quad(acc[r][0], a_abs, a, b0, ones);
      acc[r][1] = dot_quad(acc[r][1], a_abs, a, b1, ones);
    }
  }
  if (full * kQuad < Kd) {  // a last, partial quad
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + full * kTileBytesPerQuad));
    const __m256i b1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + full * kTileBytesPerQuad + 32));
    for (int r = 0; r < R; ++r) {
      const __m256i a = quad_of(lhs + r * Kd, full, Kd), a_abs = _mm256_abs_epi8(a);
      acc[r][0] = dot_quad(acc[r][0], a_abs, a, b0, ones);
      acc[r][1] = dot_quad(acc[r][1], a_abs, a, b1, ones);
    }
  }
}

// float32 -> bf16 bits, nearest even, NaN kept quiet: moe::f32_to_bf16 on 8 lanes, in the low 128 bits.
inline __m128i to_bf16(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_srli_epi32(_mm256_or_si256(bits, _mm256_set1_epi32(0x400000)), 16);
  const __m256i v = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08));
}

// What the epilogue of one call needs.
struct Epilogue {
  void* out;  // (rows, N)
  Dtype out_dtype;
  const float* lhs_scale;  // (rows)
  const float* rhs_scale;  // expert e's: 1 or N values
  bool per_column, accumulate;
  int64_t N;
};

// Dequantizes row `row`'s sums of columns [col0, col0 + cols) (cols <= 16) as the reference does:
// float(float(float(sum) * lhs_scale) * rhs_scale), then stored, rounded to bf16, or added.
void store_row(const Epilogue& ep, int64_t row, int64_t col0, int64_t cols, const __m256i (&sums)[2]) {
  const __m256 ls = _mm256_set1_ps(ep.lhs_scale[row]);
  alignas(32) float rs[kTileCols], v[kTileCols];
  if (ep.per_column) {
    std::fill(rs, rs + kTileCols, 0.0f);
    std::copy(ep.rhs_scale + col0, ep.rhs_scale + col0 + cols, rs);
  } else {
    std::fill(rs, rs + kTileCols, ep.rhs_scale[0]);
  }
  for (int h = 0; h < 2; ++h)
    _mm256_store_ps(
        v + 8 * h, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums[h]), ls), _mm256_load_ps(rs + 8 * h)));
  const int64_t i = row * ep.N + col0;
  if (ep.out_dtype == Dtype::bf16) {
    auto* o = static_cast<bf16_t*>(ep.out) + i;
    if (cols == kTileCols) {
      for (int h = 0; h < 2; ++h)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8 * h), to_bf16(_mm256_load_ps(v + 8 * h)));
    } else {
      alignas(16) bf16_t b[kTileCols];
      for (int h = 0; h < 2; ++h)
        _mm_store_si128(reinterpret_cast<__m128i*>(b + 8 * h), to_bf16(_mm256_load_ps(v + 8 * h)));
      std::copy(b, b + cols, o);
    }
    return;
  }
  float* o = static_cast<float*>(ep.out) + i;
  if (cols == kTileCols) {
    for (int h = 0; h < 2; ++h) {
      __m256 x = _mm256_load_ps(v + 8 * h);
      if (ep.accumulate) x = _mm256_add_ps(_mm256_loadu_ps(o + 8 * h), x);
      _mm256_storeu_ps(o + 8 * h, x);
    }
  } else {
    for (int64_t j = 0; j < cols; ++j) o[j] = ep.accumulate ? o[j] + v[j] : v[j];
  }
}

// Rows [row0, row0 + rows) (rows <= kTileRows) of columns [col0, col0 + cols) (cols <= 16) of a group.
template <int R>
void run_tile(const Epilogue& ep, const int8_t* lhs, const uint8_t* panel, int64_t Kd, int64_t row0,
              int64_t col0, int64_t cols) {
  __m256i acc[kTileRows][2];
  tile_sums<R>(acc, lhs + row0 * Kd, panel, Kd);
  for (int r = 0; r < R; ++r) store_row(ep, row0 + r, col0, cols, acc[r]);
}

}  // namespace

void nn_s8(const avx2_s8::Work& w, void* out, Dtype out_dtype, Int8Operands in, int64_t Kd, int64_t N,
           bool accumulate) {
  const int64_t panel_bytes = ceil_div(Kd, kQuad) * kTileBytesPerQuad;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (size_t j = 0; j < w.n_pack_jobs; ++j) {
      const avx2_s8::PackJob& p = w.pack_jobs[j];
      pack_tile(w.weights + w.packed_at[p.e] + p.tile * panel_bytes, in.rhs + p.e * Kd * N, Kd, N, p.tile);
    }
#pragma omp for schedule(dynamic, 1)
    for (size_t j = 0; j < w.n_items; ++j) {
      const avx2_s8::Item& it = w.items[j];
      const Epilogue ep{out,
                        out_dtype,
                        in.lhs_scale,
                        in.rhs_scale + (in.rhs_scale_per_column ? it.e * N : it.e),
                        in.rhs_scale_per_column,
                        accumulate,
                        N};
      for (int64_t t = it.tile0; t < it.tile0 + it.tiles; ++t) {
        const uint8_t* panel = w.weights + w.packed_at[it.e] + t * panel_bytes;
        const int64_t col0 = t * kTileCols, cols = std::min(kTileCols, N - col0);
        int64_t r = it.row0;
        for (; r + kTileRows <= it.row0 + it.rows; r += kTileRows)
          run_tile<kTileRows>(ep, in.lhs, panel, Kd, r, col0, cols);
        switch (it.row0 + it.rows - r) {
          case 3:
            run_tile<3>(ep, in.lhs, panel, Kd, r, col0, cols);
            break;
          case 2:
            run_tile<2>(ep, in.lhs, panel, Kd, r, col0, cols);
            break;
          case 1:
            run_tile<1>(ep, in.lhs, panel, Kd, r, col0, cols);
            break;
          default:
            break;
        }
      }
    }
  }
}

}  // namespace moe::cpu::isa_avx2

#pragma GCC pop_options

// Called on any CPU (--list, the registry): build-ISA code.
namespace moe::avx2_s8 {

void grouped_gemm_nn_s8(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "avx2_s8 nn_s8: float32 or bfloat16 out");
  MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "avx2_s8 nn_s8: accumulates in a float32 out only");
  gemm_detail::check_groups(groups, Kd, N);
  const int64_t tiles = (N + kTileCols - 1) / kTileCols;
  const int64_t expert_bytes = tiles * ((Kd + kQuad - 1) / kQuad) * kTileBytesPerQuad;  // tiles x panels
  // The experts with live rows, where their packed weights go, and the work items.
  std::vector<int64_t> packed_at(size_t(groups.experts), -1);
  std::vector<PackJob> pack_jobs;
  std::vector<Item> items;
  int64_t packed = 0;
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    if (!accumulate) gemm_detail::zero_padding_rows(out, out_dtype, g, N);  // left alone when accumulating
    if (g.live == 0 || tiles == 0) continue;
    packed_at[size_t(e)] = packed;
    packed += expert_bytes;
    for (int64_t t = 0; t < tiles; ++t) pack_jobs.push_back({e, t});
    for (int64_t t = 0; t < tiles; t += kBlockTiles)
      for (int64_t r = 0; r < g.live; r += kBlockRows)
        items.push_back(
            {e, g.row0 + r, std::min(kBlockRows, g.live - r), t, std::min(kBlockTiles, tiles - t)});
  }
  if (items.empty()) return;
  // One growing buffer per calling thread, reused by its calls (ranks as threads call at once).
  thread_local Buffer<std::byte> scratch;
  if (scratch.size() < size_t(packed)) scratch = Buffer<std::byte>(size_t(packed));
  const Work work{items.data(),     items.size(),     pack_jobs.data(),
                  pack_jobs.size(), packed_at.data(), reinterpret_cast<uint8_t*>(scratch.data())};
  cpu::isa_avx2::nn_s8(work, out, out_dtype, in, Kd, N, accumulate);
}

std::string gemm_library_version() {
  return "moe-bench AVX2 int8 micro-kernel (vpmaddubsw)";
}

std::string unavailable() {
  return gemm_detail::needs_isa(IsaLevel::avx2, "AVX2");
}

bool bf16_arithmetic() {
  return false;  // it has no float GEMM
}

bool same_sums_on_any_thread_count() {
  return true;  // exact integer sums
}

bool auto_candidate() {
  return true;
}

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  if (call.form != GemmForm::nn_s8) return "int8 nn only (nn_s8)";
  return "";
}

}  // namespace moe::avx2_s8
