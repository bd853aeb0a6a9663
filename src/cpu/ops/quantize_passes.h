// The bodies of moe/quantize.h's cpu functions, compiled once per ISA level: quantize.cpp at the build's
// baseline, ops/avx2/passes_avx2.cpp and ops/avx512/passes_avx512.cpp after their target pragmas
// (docs/design.md, "ISA levels"); every instance is bitwise the reference (cpu/ops/quantize_row.h says why).
// Inline functions in vec_math.h's namespace of the including file's ISA; a file including this includes the
// standard headers before its pragma and is compiled with -fno-trapping-math.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/ops/quantize_isa.h"
#include "cpu/ops/quantize_row.h"
#include "moe/quantize.h"
#include "moe/status.h"

namespace moe::cpu {
inline namespace MOE_VEC_ISA {

inline float value_at(const void* p, Dtype dt, int64_t i) {
  if (dt == Dtype::f32) return static_cast<const float*>(p)[i];
  if (dt == Dtype::f16) return widen(static_cast<const f16_t*>(p)[i]);
  return widen(static_cast<const bf16_t*>(p)[i]);
}

inline void check_float(Dtype dt) {
  MOE_CHECK(dt == Dtype::f32 || dt == Dtype::bf16 || dt == Dtype::f16,
            std::string("quantize reads float32, bfloat16 or float16, not ") + dtype_name(dt));
}

// Transposed blocks: 64 x 64 values, so the strided writes of one block stay in L1.
constexpr int64_t kTransposeBlock = 64;

// q (cols, rows) = quantized x (rows, cols) rows ld_x apart, row r with scale[r].
inline void quantize_transposed(int8_t* q, const float* scale, const void* x, Dtype dt, int64_t rows,
                                int64_t cols, int64_t ld_x) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kTransposeBlock)
    for (int64_t c0 = 0; c0 < cols; c0 += kTransposeBlock)
      for (int64_t r = r0; r < std::min(rows, r0 + kTransposeBlock); ++r)
        quantize_run(q + c0 * rows + r, rows, x, dt, r * ld_x + c0, std::min(cols, c0 + kTransposeBlock) - c0,
                     scale[r]);
}

inline void quantize_rows_impl(int8_t* q, float* scale, const void* x, Dtype dt, int64_t rows, int64_t cols,
                               int64_t ld_x, bool transposed) {
  check_float(dt);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    scale[r] = transposed ? quant_scale(amax_of(x, dt, r * ld_x, cols))
                          : quantize_block(q + r * cols, x, dt, r * ld_x, cols);
  }
  if (transposed) quantize_transposed(q, scale, x, dt, rows, cols, ld_x);
}

inline void quantize_experts_impl(int8_t* q, float* scale, ExpertWeights w, Dtype dt, int64_t E, int64_t Kd,
                                  int64_t N, bool transposed) {
  check_float(dt);
  MOE_CHECK(N % w.parts() == 0, "quantize_experts: two weight parts split N in halves");
  const int64_t part_cols = N / w.parts();
  // Per (expert, row of Kd) the amax of each part's run of the row, then per expert their max.
  std::vector<float> row_amax(size_t(E * Kd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < Kd; ++k) {
      float a = 0;
      for (int p = 0; p < w.parts(); ++p)
        a = std::max(a, amax_of(w.part(p), dt, (e * Kd + k) * part_cols, part_cols));
      row_amax[size_t(e * Kd + k)] = a;
    }
  for (int64_t e = 0; e < E; ++e)
    scale[e] = quant_scale(
        Kd == 0 ? 0.0f : *std::max_element(row_amax.begin() + e * Kd, row_amax.begin() + (e + 1) * Kd));
  if (!transposed) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t k = 0; k < Kd; ++k)
        for (int p = 0; p < w.parts(); ++p)
          quantize_run(q + (e * Kd + k) * N + p * part_cols, 1, w.part(p), dt, (e * Kd + k) * part_cols,
                       part_cols, scale[e]);
    return;
  }
  // Transposed: expert e's part p is a (Kd, part_cols) matrix whose transpose fills rows
  // [p * part_cols, (p + 1) * part_cols) of q[e] (N, Kd).
  for (int64_t e = 0; e < E; ++e)
    for (int p = 0; p < w.parts(); ++p) {
      std::vector<float> same(size_t(Kd), scale[e]);
      quantize_transposed(
          q + e * N * Kd + p * part_cols * Kd, same.data(),
          static_cast<const std::byte*>(w.part(p)) + size_t(e * Kd * part_cols) * dtype_size(dt), dt, Kd,
          part_cols, part_cols);
    }
}

inline void quantize_columns_impl(int8_t* q, float* scale, const void* w, Dtype dt, int64_t Kd, int64_t N) {
  check_float(dt);
  // Column maxima by rows (unit stride), per thread, then their max.
  const int threads = omp_get_max_threads();
  std::vector<uint32_t> partial(size_t(threads) * size_t(N), 0);
#pragma omp parallel
  {
    uint32_t* mine = partial.data() + size_t(omp_get_thread_num()) * size_t(N);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < Kd; ++k)
      for (int64_t n = 0; n < N; ++n) {
        uint32_t bits;
        const float v = value_at(w, dt, k * N + n);
        std::memcpy(&bits, &v, 4);
        mine[n] = std::max(mine[n], bits & 0x7fffffffu);
      }
  }
  for (int64_t n = 0; n < N; ++n) {
    uint32_t most = 0;
    for (int t = 0; t < threads; ++t) most = std::max(most, partial[size_t(t) * size_t(N) + size_t(n)]);
    float f;
    std::memcpy(&f, &most, 4);
    scale[n] = quant_scale(f);
  }
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < Kd; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const float v = std::clamp((value_at(w, dt, k * N + n) / scale[n] + kRoundingShift) - kRoundingShift,
                                 -127.0f, 127.0f);
      q[k * N + n] = int8_t(v);
    }
}

inline void quantize_token_rows_impl(int8_t* q, float* scale, const void* x, Dtype dt, int64_t tokens,
                                     int64_t topk, int64_t cols, const int32_t* assignment_row) {
  check_float(dt);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t first = -1;
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t r = assignment_row[t * topk + k];
      if (r < 0) continue;
      if (first < 0) {
        first = r;
        scale[r] = quantize_block(q + r * cols, x, dt, r * cols, cols);
      } else {
        scale[r] = scale[first];
        std::memcpy(q + r * cols, q + first * cols, size_t(cols));
      }
    }
  }
}

// This ISA's passes, for the level's entry in quantize_isa.h.
inline QuantizePasses quantize_passes_here() {
  return {&quantize_rows_impl, &quantize_experts_impl, &quantize_columns_impl, &quantize_token_rows_impl};
}

}  // namespace MOE_VEC_ISA
}  // namespace moe::cpu

// Defines `name`, a level's entry in quantize_isa.h, as this file's passes (in moe::cpu, outside the
// target pragma).
#define MOE_DEFINE_QUANTIZE_PASSES(name) \
  QuantizePasses name() {                \
    return quantize_passes_here();       \
  }
