// The bodies of swiglu.h's passes, compiled once per ISA level: swiglu.cpp at the build's baseline,
// swiglu_avx2.cpp and swiglu_avx512.cpp after their target pragmas (docs/design.md, "ISA levels").
// Inline functions in vec_math.h's namespace of the including file's ISA, so each file keeps its own
// copies. A file including this includes the standard headers before its pragma and is compiled with
// -fno-trapping-math (CMakeLists.txt: exp_approx's clamps are then if-converted and the loops vectorise).
#pragma once

#include <vector>

#include "cpu/quantize_row.h"
#include "cpu/swiglu.h"
#include "cpu/swiglu_isa.h"
#include "cpu/vec_math.h"
#include "moe/quantize.h"

namespace moe::cpu {
inline namespace MOE_VEC_ISA {

// g (M) = silu(a) * b * w for one row, in float.
inline void swiglu_row(float* g, const float* a, const float* b, float w, int64_t M) {
#pragma omp simd
  for (int64_t m = 0; m < M; ++m) g[m] = a[m] * sigmoid_approx(a[m]) * b[m] * w;
}

// Row r's gate and up as floats (bf16 widened into the scratch rows, f32 read in place).
struct GateUpRow {
  const float* a;
  const float* b;
};
inline GateUpRow gate_up_row(float* a_scratch, float* b_scratch, GateUp in, Dtype dt, int64_t r, int64_t M) {
  const size_t at = size_t(r * in.ld) * dtype_size(dt);
  return {load_row_f32(a_scratch, static_cast<const char*>(in.a) + at, dt, M),
          load_row_f32(b_scratch, static_cast<const char*>(in.b) + at, dt, M)};
}

// swiglu_forward, or with gq: swiglu_forward_quantized.
inline void swiglu_forward_rows(void* g, Dtype g_dt, int8_t* gq, float* g_scale, GateUp in, Dtype dt,
                                int64_t rows, int64_t M, const float* row_weight) {
  const size_t g_elem = dtype_size(g_dt);
#pragma omp parallel
  {
    std::vector<float> a_buf(static_cast<size_t>(M)), b_buf(static_cast<size_t>(M)),
        g_buf(static_cast<size_t>(M));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const auto [a, b] = gate_up_row(a_buf.data(), b_buf.data(), in, dt, r, M);
      float* out = g_buf.data();
      swiglu_row(out, a, b, row_weight ? row_weight[r] : 1.0f, M);
      char* g_row = static_cast<char*>(g) + size_t(r * M) * g_elem;
      store_row(g_row, g_dt, out, M);
      if (!gq) continue;
      // The row as stored (rounded to g_dt) is what the reference and quantize_rows(g) quantize; it is
      // still in L1.
      g_scale[r] = quant_scale(amax_of(g_row, g_dt, 0, M));
      quantize_run(gq + r * M, 1, g_row, g_dt, 0, M, g_scale[r]);
    }
  }
}

inline void swiglu_forward_plain(void* g, Dtype g_dt, GateUp in, Dtype dt, int64_t rows, int64_t M,
                                 const float* row_weight) {
  swiglu_forward_rows(g, g_dt, nullptr, nullptr, in, dt, rows, M, row_weight);
}

inline void swiglu_backward_rows(GateUpGrad out, Dtype out_dt, const void* dg, GateUp in, Dtype dt,
                                 int64_t rows, int64_t M, const float* row_weight) {
  const size_t elem = dtype_size(dt), out_elem = dtype_size(out_dt);
  // dh (rows, 2M) is read next by GEMMs, after it has left the caches: its lines go out unfetched.
  const bool stream = size_t(rows * M) * 2 * out_elem >= kStreamRowsBytes &&
                      streams_bf16_rows(out_dt, M, out.da) && streams_bf16_rows(out_dt, M, out.db) &&
                      streams_lines(out.da, size_t(out.ld) * out_elem);
#pragma omp parallel
  {
    std::vector<float> a_buf(static_cast<size_t>(M)), b_buf(static_cast<size_t>(M)),
        dg_buf(static_cast<size_t>(M)), da(static_cast<size_t>(M)), db(static_cast<size_t>(M));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const auto [a, b] = gate_up_row(a_buf.data(), b_buf.data(), in, dt, r, M);
      const float* d =
          load_row_f32(dg_buf.data(), static_cast<const char*>(dg) + size_t(r * M) * elem, dt, M);
      const float w = row_weight ? row_weight[r] : 1.0f;
      float* pa = da.data();
      float* pb = db.data();
#pragma omp simd
      for (int64_t m = 0; m < M; ++m) {
        float s = sigmoid_approx(a[m]);
        float dgw = d[m] * w;
        pa[m] = dgw * b[m] * s * (1.0f + a[m] * (1.0f - s));
        pb[m] = dgw * a[m] * s;
      }
      char* da_row = static_cast<char*>(out.da) + size_t(r * out.ld) * out_elem;
      char* db_row = static_cast<char*>(out.db) + size_t(r * out.ld) * out_elem;
      if (stream) {
        stream_row_bf16(reinterpret_cast<bf16_t*>(da_row), pa, M);
        stream_row_bf16(reinterpret_cast<bf16_t*>(db_row), pb, M);
      } else {
        store_row(da_row, out_dt, pa, M);
        store_row(db_row, out_dt, pb, M);
      }
    }
    if (stream) end_streams();
  }
}

// This ISA's passes, for the level's entry in swiglu_isa.h.
inline SwigluPasses swiglu_passes_here() {
  return {&swiglu_forward_plain, &swiglu_backward_rows, &swiglu_forward_rows};
}

}  // namespace MOE_VEC_ISA
}  // namespace moe::cpu
