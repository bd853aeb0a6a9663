// Our int8 kernel (cpu/gemm/gemm_s8.h lays out its work): packing, the rows' corrections, the register tile,
// the epilogues (nn_s8's dequantization; nn_s8_swiglu's dequantization, SwiGLU and g's row quantization),
// written once over a vector layer `L` that supplies what differs between instances:
//   L::kLanes, L::kRows     int32 lanes of a vector; rows of the register tile (its columns: 2 vectors)
//   L::kShifted             weights packed as u8 = b + 128 with each row's correction, or as s8
//   L::Vec, Floats, Bits, Halves, Bytes
//                           GCC vectors of kLanes int32, float, uint32, uint16 and int8
//   L::dot(acc, b, a)       acc + per lane the 4 products of b's bytes (u8 or s8) and a (a row's quad,
//                           broadcast), exact (VPDPBUSD; or VPMADDUBSW of |a| and b with a's sign)
//   L::stream(p, v), fence  a non-temporal store of a whole vector; the fence after them
//   L::widen(p)             kLanes bytes at p, zero-extended into the lanes of a Bits
//   L::fma(a, b, c)         a * b + c (fused where the ISA has it: the SwiGLU epilogue's sigmoid)
// Everything else is GCC vector extensions and plain loops, which the including file's target pragma makes
// that ISA's code (zmm for AVX-512, ymm for AVX2, SSE for the emulation).
//
// Include after the ISA's target pragma with MOE_S8_NS naming the instance's namespace (one per ISA: the
// linker keeps one copy of an inline function, docs/design.md "ISA levels"); the file is compiled without
// FMA contraction (CMakeLists.txt), as every int8 kernel: the epilogue is the reference's three rounded
// float32 steps, and g's quantization the reference's division and rounding.
#pragma once

#include <omp.h>

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm/gemm_s8.h"
#include "cpu/gemm/tile_rows.h"

namespace MOE_S8_NS {

// The vector types of a layer of 512 or 256 bits (GCC takes no vector_size that depends on a template
// parameter, hence a macro). Types only: a layer adds its functions.
#define MOE_S8_VECTOR_TYPES(bytes)                                 \
  using Vec = int32_t __attribute__((vector_size(bytes)));         \
  using Floats = float __attribute__((vector_size(bytes)));        \
  using Bits = uint32_t __attribute__((vector_size(bytes)));       \
  using Halves = uint16_t __attribute__((vector_size(bytes / 2))); \
  using Bytes = int8_t __attribute__((vector_size(bytes / 4)))
struct Vectors512 {
  MOE_S8_VECTOR_TYPES(64);
};
struct Vectors256 {
  MOE_S8_VECTOR_TYPES(32);
};
#undef MOE_S8_VECTOR_TYPES

using moe::s8::Item;
using moe::s8::PackJob;
using moe::s8::Swiglu;
using moe::s8::Work;

template <class L>
struct Kernel {
  using Vec = typename L::Vec;
  using Floats = typename L::Floats;
  using Bits = typename L::Bits;
  using Halves = typename L::Halves;
  using Bytes = typename L::Bytes;
  static constexpr int kLanes = L::kLanes, kRows = L::kRows;
  static constexpr int64_t kTileCols = 2 * kLanes;  // in the packed tile (SwiGLU: kLanes gate, kLanes up)
  static constexpr moe::s8::Geometry kGeometry{kLanes, kRows, L::kShifted};

  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
  static int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }

  // ---- where a tile's two vectors come from: columns of one expert's weights ---------------------------
  struct Source {
    const int8_t* w;     // the expert's (Kd, ld) weights
    int64_t ld, col;     // their row length; the vector's first column
    int64_t count;       // its columns, 0..kLanes
    const float* scale;  // per column: the first column's scale; else the expert's one scale
    bool per_column;
  };
  // nn_s8: vector v of tile t is columns [kTileCols t + kLanes v, + kLanes) of rhs (E, Kd, N). nn_s8_swiglu:
  // the gate's (v = 0) or the up projection's (v = 1) columns [kLanes t, + kLanes): of rhs (E, Kd, 2M) at
  // 0 and M, or of the two parts (E, Kd, M).
  static Source source(const Work& w, int64_t e, int64_t t, int v) {
    const bool per_column = w.in.rhs_scale_per_column;
    if (!w.swiglu) {
      const int64_t col = t * kTileCols + v * kLanes;
      return {w.in.rhs + e * w.Kd * w.N,
              w.N,
              col,
              max(0, min(kLanes, w.N - col)),
              per_column ? w.in.rhs_scale + e * w.N + col : w.in.rhs_scale + e,
              per_column};
    }
    const int64_t M = w.swiglu->M, count = max(0, min(kLanes, M - t * kLanes));
    if (w.swiglu->up.rhs) {
      const float* scales = v ? w.swiglu->up.rhs_scale : w.in.rhs_scale;
      return {(v ? w.swiglu->up.rhs : w.in.rhs) + e * w.Kd * M,      M,         t * kLanes, count,
              per_column ? scales + e * M + t * kLanes : scales + e, per_column};
    }
    const int64_t col = v * M + t * kLanes;
    return {w.in.rhs + e * w.Kd * 2 * M,
            2 * M,
            col,
            count,
            per_column ? w.in.rhs_scale + e * 2 * M + col : w.in.rhs_scale + e,
            per_column};
  }

  // ---- packing: one vector's columns -> (quads, 2 vectors) of dwords, u8 shifted or s8 --------------------
  static uint8_t packed_byte(int8_t v) { return L::kShifted ? uint8_t(uint8_t(v) ^ 0x80u) : uint8_t(v); }

  // Dword j = the bytes j of 4 rows ld apart (row i in byte i), shifted where the instance is: whole vectors
  // built in registers (dwords assembled byte by byte, which is what GCC 12 makes of a plain loop or of
  // __builtin_convertvector here, made packing per call a fifth of the seed's down projection).
  static Bits quad_dwords(const int8_t* r, int64_t ld) {
    const Bits d =
        L::widen(r) | L::widen(r + ld) << 8 | L::widen(r + 2 * ld) << 16 | L::widen(r + 3 * ld) << 24;
    return L::kShifted ? d ^ 0x80808080u : d;
  }

  // Quad q of vector v of a tile into `dst` (the tile's packing), element by element, 0 past Kd and count.
  static void pack_quad(uint8_t* dst, const Source& s, int64_t Kd, int v, int64_t q) {
    uint8_t* d = dst + q * kTileCols * 4 + v * sizeof(Vec);
    for (int64_t j = 0; j < kLanes; ++j)
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t k = 4 * q + i;
        d[j * 4 + i] = j < s.count && k < Kd ? packed_byte(s.w[k * s.ld + s.col + j]) : 0;
      }
  }

  // -128 x the sum of each row of lhs (Kd int8), modulo 2^32 like the sums it corrects.
  static int32_t correction(const int8_t* row, int64_t Kd) {
    int32_t sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < Kd; ++k) sum += row[k];
    return int32_t(uint32_t(sum) * 0xffffff80u);
  }

  // ---- the register tile ----------------------------------------------------------------------------------
  static Vec load(const uint8_t* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static int32_t quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }

  // acc[m] += staged rows m < R of a (lda apart, zeros past Kd) x quads [q0, q1) of a packed tile.
  template <int R>
  static void multiply(Vec (&acc)[kRows][2], const int8_t* a, int64_t lda, const uint8_t* panel, int64_t q0,
                       int64_t q1) {
    const int64_t rb3 = 3 * lda;
    const int8_t* p = a + 4 * q0;
    const int8_t* q = p + 5 * lda;
    const int8_t* r = p + 10 * lda;
    for (const uint8_t *b = panel + q0 * kTileCols * 4, *end = panel + q1 * kTileCols * 4; b != end;
         b += kTileCols * 4, p += 4, q += 4, r += 4) {
      const Vec b0 = load(b), b1 = load(b + sizeof(Vec));
      [&]<int... M>(std::integer_sequence<int, M...>) {
        ((acc[M][0] = L::dot(acc[M][0], b0, quad(gemm_detail::tile_row<M>(p, q, r, lda, rb3))),
          acc[M][1] = L::dot(acc[M][1], b1, quad(gemm_detail::tile_row<M>(p, q, r, lda, rb3)))),
         ...);
      }
      (std::make_integer_sequence<int, R>{});
    }
  }

  // ---- vector pieces of the epilogues
  // ------------------------------------------------------------------------ moe::f32_to_bf16 of each lane:
  // nearest even, NaN kept quiet.
  static Halves to_bf16(Floats f) {
    const Bits b = Bits(f);
    const Bits rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16, quiet = (b >> 16) | 0x40u;
    return __builtin_convertvector((b & 0x7fffffffu) > 0x7f800000u ? quiet : rounded, Halves);
  }
  static Floats from_bf16(Halves h) {
    return Floats(__builtin_convertvector(h, Bits) << 16);
  }
  static bool aligned(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & (sizeof(Vec) - 1)) == 0;
  }

  // `bytes` of `from` to p: a whole value's with a constant size (vector stores; a size the compiler cannot
  // see is a library call or rep movs, which cost the epilogues a third of their time).
  template <class V>
  static void put(void* p, const V& from, size_t bytes) {
    if (bytes == sizeof from)
      std::memcpy(p, &from, sizeof from);
    else
      std::memcpy(p, &from, bytes);
  }
  // `count` values (<= kLanes) of v to p in dt (rounded to bf16 there).
  static void store(void* p, moe::Dtype dt, Floats v, int64_t count) {
    if (dt == moe::Dtype::bf16)
      put(p, to_bf16(v), size_t(count) * 2);
    else
      put(p, v, size_t(count) * 4);
  }
  // A value as stored in dt.
  static Floats as_stored(Floats v, moe::Dtype dt) {
    return dt == moe::Dtype::bf16 ? from_bf16(to_bf16(v)) : v;
  }

  // A vector's weight scales: its columns' (zeros past count) or the expert's.
  static Floats scales_of(const Source& s) {
    if (!s.per_column) return Floats{} + s.scale[0];
    alignas(sizeof(Vec)) float rs[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) rs[j] = j < s.count ? s.scale[j] : 0.0f;
    Floats v;
    std::memcpy(&v, rs, sizeof v);
    return v;
  }

  // sigmoid(z) = 1 / (1 + e^-z), e^x as vec_math.h's exp_approx computes it (Cody-Waite reduction, a
  // degree-7 polynomial, 2^n from the exponent bits), on vectors, with the layer's fused multiply-adds (the
  // file is compiled without contraction, for the dequantization's sake).
  static Floats sigmoid(Floats z) {
    Floats x = -z;
    x = x < -87.3f ? Floats{} - 87.3f : x;
    x = x > 88.3f ? Floats{} + 88.3f : x;
    const Floats n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    Floats r = L::fma(n, Floats{} - 0.693145751953125f, x);
    r = L::fma(n, Floats{} - 1.428606765330187e-06f, r);
    Floats p = Floats{} + 1.0f / 5040.0f;
    for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
      p = L::fma(p, r, Floats{} + c);
    const Floats two_n = Floats((__builtin_convertvector(n, Vec) + 127) << 23);
    return 1.0f / L::fma(p, two_n, Floats{} + 1.0f);
  }

  // ---- nn_s8's epilogue: float(float(float(sum) * lhs_scale) * rhs_scale), stored, rounded or added
  // -------- Whole vectors of a large output leave with non-temporal stores (w.stream), so no line of it is
  // read before it is overwritten.
  [[gnu::always_inline]] static void store_row(const Work& w, const Floats (&scale)[2], int64_t row,
                                               int64_t col0, int64_t cols, const Vec (&s)[2]) {
    const float ls = w.in.lhs_scale[row];
    Floats v[2];
    for (int h = 0; h < 2; ++h) v[h] = __builtin_convertvector(s[h], Floats) * ls * scale[h];
    const int64_t at = row * w.N + col0;
    if (w.out_dtype == moe::Dtype::bf16) {
      uint16_t* out = static_cast<uint16_t*>(w.out) + at;
      const Halves o[2] = {to_bf16(v[0]), to_bf16(v[1])};
      if (cols == kTileCols && w.stream && aligned(out)) {
        Vec both;
        std::memcpy(&both, o, sizeof both);
        L::stream(out, both);
      } else {
        put(out, o, size_t(cols) * 2);
      }
      return;
    }
    float* o = static_cast<float*>(w.out) + at;
    if (w.accumulate) {
      float sum[kTileCols];
      std::memcpy(sum, v, sizeof sum);
      for (int64_t j = 0; j < cols; ++j) sum[j] = o[j] + sum[j];
      std::memcpy(v, sum, sizeof sum);
    }
    if (cols == kTileCols && w.stream && !w.accumulate && aligned(o)) {
      L::stream(o, Vec(v[0]));
      L::stream(o + kLanes, Vec(v[1]));
    } else {
      put(o, v, size_t(cols) * 4);
    }
  }

  // ---- nn_s8_swiglu's epilogue ----------------------------------------------------------------------------
  // A tile's epilogue writes h's gate and up values, dequantized and rounded to dt as nn_s8's, to the
  // thread's staging rows of h (h_stage: the item's rows [gate | up], 2M apart, which stay in L2); when the
  // item's tiles are done, flush_rows runs SwiGLU over each staged row into the staging row of g (g_stage),
  // quantizes it, and writes g, gq (and h, where kept) out with non-temporal stores. So h never makes a round
  // trip through memory, and the SwiGLU pass runs over whole rows from L2.
  [[gnu::always_inline]] static void stage_h_row(const Work& w, const Floats (&scale)[2], int64_t row,
                                                 char* h_row, int64_t col, int64_t count, const Vec (&s)[2]) {
    const moe::Dtype dt = w.out_dtype;
    const size_t elem = moe::dtype_size(dt);
    const float ls = w.in.lhs_scale[row];
    store(h_row + size_t(col) * elem, dt, __builtin_convertvector(s[0], Floats) * ls * scale[0], count);
    store(h_row + size_t(w.swiglu->M + col) * elem, dt, __builtin_convertvector(s[1], Floats) * ls * scale[1],
          count);
  }

  // g = silu(gate) * up * weight of a staged row of h (values as stored in dt) into a staged row of g: whole
  // vectors, then the row's tail zero-padded.
  static Floats swiglu(Floats gate, Floats up, float weight) {
    return gate * sigmoid(gate) * up * weight;
  }
  static void swiglu_row(char* g, const char* h, moe::Dtype dt, int64_t M, float weight) {
    const size_t elem = moe::dtype_size(dt);
    const int64_t whole = M / kLanes * kLanes;
    if (dt == moe::Dtype::bf16) {
      for (int64_t c = 0; c < whole; c += kLanes) {
        const Halves out = to_bf16(swiglu(g_values(h, dt, c), g_values(h, dt, M + c), weight));
        std::memcpy(g + size_t(c) * elem, &out, sizeof out);
      }
    } else {
      for (int64_t c = 0; c < whole; c += kLanes) {
        const Floats out = swiglu(g_values(h, dt, c), g_values(h, dt, M + c), weight);
        std::memcpy(g + size_t(c) * elem, &out, sizeof out);
      }
    }
    if (whole == M) return;
    alignas(sizeof(Vec)) char tail[2][sizeof(Vec)] = {};
    std::memcpy(tail[0], h + size_t(whole) * elem, size_t(M - whole) * elem);
    std::memcpy(tail[1], h + size_t(M + whole) * elem, size_t(M - whole) * elem);
    store(g + size_t(whole) * elem, dt, swiglu(g_values(tail[0], dt, 0), g_values(tail[1], dt, 0), weight),
          M - whole);
  }

  // A staged row of g (M values in dt) as floats, kLanes from column c, or one value.
  static Floats g_values(const void* g, moe::Dtype dt, int64_t c) {
    if (dt == moe::Dtype::bf16) {
      Halves h;
      std::memcpy(&h, static_cast<const uint16_t*>(g) + c, sizeof h);
      return from_bf16(h);
    }
    Floats v;
    std::memcpy(&v, static_cast<const float*>(g) + c, sizeof v);
    return v;
  }
  static float g_value(const void* g, moe::Dtype dt, int64_t c) {
    if (dt == moe::Dtype::f32) return static_cast<const float*>(g)[c];
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(g)[c]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  static uint32_t magnitude_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b & 0x7fffffffu;
  }

  // A row's scale as moe/quantize.h's quantize_rows makes it: amax / 127 + FLT_MIN, amax over the values'
  // bit patterns with the sign cleared (as cpu/ops/quantize_row.h).
  static float g_row_scale(const void* g, moe::Dtype dt, int64_t M) {
    const int64_t whole = M / kLanes * kLanes;
    Bits most{};
    for (int64_t c = 0; c < whole; c += kLanes) {
      const Bits b = Bits(g_values(g, dt, c)) & 0x7fffffffu;
      most = b > most ? b : most;
    }
    uint32_t amax = 0;
    for (int i = 0; i < kLanes; ++i) amax = most[i] > amax ? most[i] : amax;
    for (int64_t c = whole; c < M; ++c) {
      const uint32_t b = magnitude_bits(g_value(g, dt, c));
      amax = b > amax ? b : amax;
    }
    float a;
    std::memcpy(&a, &amax, 4);
    return a / 127.0f + FLT_MIN;
  }
  // clip(round_half_even(v / scale), -127, 127): the reference's float32 division, rounded by the 1.5 x 2^23
  // addition (exact here: |v / scale| <= 127).
  static float quantized(float v, float scale) {
    const float r = (v / scale + 12582912.0f) - 12582912.0f;
    return r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
  }
  static void quantize_g_row(const void* g, moe::Dtype dt, int64_t M, float scale, int8_t* q) {
    const int64_t whole = M / kLanes * kLanes;
    for (int64_t c = 0; c < whole; c += kLanes) {
      Floats r = (g_values(g, dt, c) / scale + 12582912.0f) - 12582912.0f;
      r = r > 127.0f ? Floats{} + 127.0f : r;
      r = r < -127.0f ? Floats{} - 127.0f : r;
      const Bytes b = __builtin_convertvector(__builtin_convertvector(r, Vec), Bytes);
      std::memcpy(q + c, &b, sizeof b);
    }
    for (int64_t c = whole; c < M; ++c) q[c] = int8_t(quantized(g_value(g, dt, c), scale));
  }

  // `bytes` from src to dst: whole aligned vectors with non-temporal stores (nothing reads them soon), the
  // rest copied.
  static void stream_bytes(void* dst, const void* src, int64_t bytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const int64_t lead =
        aligned(d)
            ? 0
            : min(bytes, int64_t(sizeof(Vec)) - int64_t(reinterpret_cast<uintptr_t>(d) & (sizeof(Vec) - 1)));
    std::memcpy(d, s, size_t(lead));
    int64_t i = lead;
    for (; i + int64_t(sizeof(Vec)) <= bytes; i += sizeof(Vec))
      L::stream(d + i, load(reinterpret_cast<const uint8_t*>(s + i)));
    std::memcpy(d + i, s + i, size_t(bytes - i));
  }

  // The item's staged rows of h -> g, g_scale, gq, and h where kept.
  static void flush_rows(const Work& w, const Item& it, const char* h_stage, char* g_stage) {
    const Swiglu& sw = *w.swiglu;
    const moe::Dtype dt = w.out_dtype;
    const int64_t M = sw.M, row_bytes = M * int64_t(moe::dtype_size(dt));
    alignas(sizeof(Vec)) int8_t q[kQuantChunk];
    for (int64_t m = 0; m < it.rows; ++m) {
      const int64_t row = it.row0 + m;
      const char* h = h_stage + m * 2 * row_bytes;
      char* g = g_stage + m * row_bytes;
      if (sw.out.keep_h) stream_bytes(static_cast<char*>(sw.out.h) + row * 2 * row_bytes, h, 2 * row_bytes);
      swiglu_row(g, h, dt, M, sw.row_weight ? sw.row_weight[row] : 1.0f);
      const float scale = g_row_scale(g, dt, M);
      sw.out.g_scale[row] = scale;
      for (int64_t c = 0; c < M; c += kQuantChunk) {  // through L1, a chunk at a time
        const int64_t n = min(kQuantChunk, M - c);
        quantize_g_row(g + c * int64_t(moe::dtype_size(dt)), dt, n, scale, q);
        stream_bytes(sw.out.gq + row * M + c, q, n);
      }
      stream_bytes(static_cast<char*>(sw.out.g) + row * row_bytes, g, row_bytes);
    }
  }
  static constexpr int64_t kQuantChunk = 1024;  // a multiple of every kLanes

  // ---- a register tile over one reduction chunk, then its epilogue
  // ----------------------------------------- One reduction chunk: quads [q0, q1) of the packed tile `panel`
  // and of the item's staged rows (stage, lda apart).
  struct Chunk {
    const uint8_t* panel;
    const int8_t* stage;
    int64_t lda, q0, q1;
    bool first, last;
    char* h_stage;  // nn_s8_swiglu: the item's rows of h
  };

  // Rows [row0, row0 + R) x tile t of item `it` over one chunk: the sums start at the rows' corrections (or
  // zero) in the first chunk, else at `partial`, and go to the epilogue (the last chunk) or back to
  // `partial`.
  template <int R>
  static void run_tile(const Work& w, const Item& it, int64_t row0, int64_t t, const Chunk& c,
                       Vec (*partial)[2]) {
    Vec acc[kRows][2];
    for (int m = 0; m < R; ++m) {
      if (!c.first) {
        acc[m][0] = partial[m][0];
        acc[m][1] = partial[m][1];
      } else {
        acc[m][0] = acc[m][1] = Vec{} + (L::kShifted ? w.correction[row0 + m] : 0);
      }
    }
    multiply<R>(acc, c.stage + (row0 - it.row0) * c.lda, c.lda, c.panel, c.q0, c.q1);
    if (!c.last) {
      for (int m = 0; m < R; ++m) {
        partial[m][0] = acc[m][0];
        partial[m][1] = acc[m][1];
      }
      return;
    }
    const Source s0 = source(w, it.e, t, 0), s1 = source(w, it.e, t, 1);
    const Floats scale[2] = {scales_of(s0), scales_of(s1)};
    if (w.swiglu) {
      const int64_t h_row_bytes = 2 * w.swiglu->M * int64_t(moe::dtype_size(w.out_dtype));
      for (int m = 0; m < R; ++m)
        stage_h_row(w, scale, row0 + m, c.h_stage + (row0 + m - it.row0) * h_row_bytes, t * kLanes, s0.count,
                    acc[m]);
    } else {
      for (int m = 0; m < R; ++m) store_row(w, scale, row0 + m, s0.col, s0.count + s1.count, acc[m]);
    }
  }

  // Tiles<...>::fns[r - 1] runs r rows (a plain array: no library template instantiated in ISA code).
  using TileFn = void (*)(const Work&, const Item&, int64_t, int64_t, const Chunk&, Vec (*)[2]);
  template <class Seq>
  struct Tiles;
  template <int... R>
  struct Tiles<std::integer_sequence<int, R...>> {
    static constexpr TileFn fns[] = {&run_tile<R + 1>...};
  };

  // An item's rows of lhs staged (moe::s8::stage_ld apart, zero-padded to the quad).
  static void stage_rows(int8_t* stage, const Work& w, const Item& it) {
    const int64_t ld = moe::s8::stage_ld(w.Kd), padded = (w.Kd + 3) / 4 * 4;
    for (int64_t m = 0; m < it.rows; ++m) {
      std::memcpy(stage + m * ld, w.in.lhs + (it.row0 + m) * w.Kd, size_t(w.Kd));
      std::memset(stage + m * ld + w.Kd, 0, size_t(padded - w.Kd));
    }
  }

  // An item tile by tile. A reduction deeper than kChunkQuads quads (2048 elements) goes in chunks, the
  // item's partial sums (6 KiB) kept in between, so that a tile's packed chunk (64 KiB on zmm) stays in L2
  // while the item's row tiles pass. (Chunks of 64 quads, to stay in L1, measured 15 % slower at Kd = 1024: a
  // chunk's ends cost more than its L1 hits gained; 256 and 512 alike.) nn_s8_swiglu's items hold whole rows
  // of g, quantized last while they are in L2.
  static constexpr int64_t kChunkQuads = 512;
  static void run_item(const Work& w, const Item& it, int8_t* stage, char* h_stage, char* g_stage) {
    const auto& kTiles = Tiles<std::make_integer_sequence<int, kRows>>::fns;
    alignas(sizeof(Vec)) Vec partial[moe::s8::kMaxItemRows][2];
    stage_rows(stage, w, it);
    const int64_t tile_bytes = kGeometry.tile_bytes(w.Kd), quads = (w.Kd + 3) / 4,
                  ld = moe::s8::stage_ld(w.Kd);
    for (int64_t t = it.tile0; t < it.tile0 + it.tiles; ++t) {
      const uint8_t* panel = w.packed + w.packed_at[it.e] + t * tile_bytes;
      for (int64_t q0 = 0; q0 == 0 || q0 < quads; q0 += kChunkQuads) {
        const int64_t q1 = min(quads, q0 + kChunkQuads);
        const Chunk c{panel, stage, ld, q0, q1, q0 == 0, q1 == quads, h_stage};
        for (int64_t r = it.row0; r < it.row0 + it.rows; r += kRows)
          kTiles[size_t(min(kRows, it.row0 + it.rows - r) - 1)](w, it, r, t, c, partial + (r - it.row0));
      }
    }
    if (w.swiglu) flush_rows(w, it, h_stage, g_stage);
  }

  // Quads [quad0, quad1) of every tile of one expert into their places in the packed weights, 4 rows of the
  // weights at a time, read along their rows (a tile at a time read columns rows apart, a line each, which
  // the prefetchers do not follow across pages). Whole quads of whole tiles go as vectors from two row
  // pointers (a tile's columns are `step` on from the one before's); the rest, at most the last tile and
  // the last quad, through pack_quad.
  static void pack_quads(const Work& w, const PackJob& p) {
    const int64_t tile_bytes = kGeometry.tile_bytes(w.Kd), stride = kTileCols * 4;
    const int64_t step = w.swiglu ? kLanes : kTileCols;
    uint8_t* expert = w.packed + w.packed_at[p.e];
    int64_t whole_tiles = w.tiles;
    while (whole_tiles > 0 && (source(w, p.e, whole_tiles - 1, 0).count < kLanes ||
                               source(w, p.e, whole_tiles - 1, 1).count < kLanes))
      --whole_tiles;
    const Source s0 = source(w, p.e, 0, 0), s1 = source(w, p.e, 0, 1);
    const int64_t whole_quads = max(p.quad0, min(p.quad1, w.Kd / 4));
    for (int64_t q = p.quad0; q < whole_quads; ++q) {
      const int8_t *r0 = s0.w + 4 * q * s0.ld + s0.col, *r1 = s1.w + 4 * q * s1.ld + s1.col;
      uint8_t* d = expert + q * stride;
      for (int64_t t = 0; t < whole_tiles; ++t, d += tile_bytes) {
        const Bits v0 = quad_dwords(r0 + t * step, s0.ld), v1 = quad_dwords(r1 + t * step, s1.ld);
        std::memcpy(d, &v0, sizeof v0);
        std::memcpy(d + sizeof(Vec), &v1, sizeof v1);
      }
    }
    for (int64_t t = 0; t < w.tiles; ++t)
      for (int64_t q = t < whole_tiles ? whole_quads : p.quad0; q < p.quad1; ++q)
        for (int v = 0; v < 2; ++v) pack_quad(expert + t * tile_bytes, source(w, p.e, t, v), w.Kd, v, q);
  }

  static void run(const Work& w) {
#pragma omp parallel
    {
      if constexpr (L::kShifted) {
#pragma omp for schedule(static) nowait  // the first phase's packing ends in a barrier
        for (int64_t r = 0; r < w.rows; ++r) w.correction[r] = correction(w.in.lhs + r * w.Kd, w.Kd);
      }
      int8_t* stage = w.stage + omp_get_thread_num() * w.stage_bytes;
      char* h_stage = w.swiglu_stage + omp_get_thread_num() * w.swiglu_stage_bytes;
      char* g_stage =
          h_stage +
          (w.swiglu ? 2 * moe::s8::kMaxItemRows * w.swiglu->M * int64_t(moe::dtype_size(w.out_dtype)) : 0);
      for (size_t p = 0; p < w.phases; ++p) {
        // Its barrier: the phase is packed, and the phase before's items are done (each thread ran its share
        // before packing this one), so the next phase may pack into their slot.
#pragma omp for schedule(static)
        for (size_t j = w.phase_jobs[p]; j < w.phase_jobs[p + 1]; ++j) pack_quads(w, w.pack_jobs[j]);
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t j = w.phase_items[p]; j < w.phase_items[p + 1]; ++j)
          run_item(w, w.items[j], stage, h_stage, g_stage);
      }
      if (w.stream || w.swiglu) L::fence();  // this thread's streamed stores are seen before the call returns
#pragma omp barrier
    }
  }
};

// The instance of the kernel on layer L (cpu/gemm/gemm_s8.h), named `name`.
template <class L>
constexpr moe::s8::Instance instance_of(const char* name) {
  return {name, Kernel<L>::kGeometry, &Kernel<L>::run};
}

}  // namespace MOE_S8_NS
