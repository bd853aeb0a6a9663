// The bodies of swiglu.h's passes, compiled once per ISA level: swiglu.cpp at the build's baseline,
// ops/avx2/passes_avx2.cpp and ops/avx512/passes_avx512.cpp after their target pragmas (docs/design.md,
// "ISA levels").
// Inline functions in vec_math.h's namespace of the including file's ISA, so each file keeps its own
// copies. A file including this includes the standard headers before its pragma and is compiled with
// -fno-trapping-math (CMakeLists.txt: exp_approx's clamps are then if-converted and the loops vectorise).
#pragma once

#include <vector>

#include "cpu/ops/quantize_row.h"
#include "cpu/ops/swiglu.h"
#include "cpu/ops/swiglu_isa.h"
#include "cpu/ops/vec_math.h"
#include "moe/quantize.h"

namespace moe::cpu {
inline namespace MOE_VEC_ISA {

// The passes read their f32 or bf16 inputs in place, widening in the loop that uses them: no scratch copy
// of each row (a pass through L1, and scratch rows 4 KiB + a malloc header apart whose reads may collide
// with the copy's stores in the low 12 address bits; the suspect for the AVX2 forward's slowness on the
// AMX host, the kernels log (git show 26fb9b0:docs/kernels.md), "Session 17", not measured there since).
// Gate, up and gradient values go through vec_math.h's widen().

inline void check_swiglu_dtype(Dtype dt) {
  MOE_CHECK(dt == Dtype::f32 || dt == Dtype::bf16 || dt == Dtype::f16,
            std::string("SwiGLU reads float32, bfloat16 or float16, not ") + dtype_name(dt));
}

// g (M) = silu(a) * b * w for one row, in float.
template <typename In>
inline void swiglu_row(float* g, const In* a, const In* b, float w, int64_t M) {
#pragma omp simd
  for (int64_t m = 0; m < M; ++m) {
    const float x = widen(a[m]);
    g[m] = x * sigmoid_approx(x) * widen(b[m]) * w;
  }
}

// da (M) = dg * w * b * silu'(a), db (M) = dg * w * silu(a) for one row, in float.
template <typename In>
inline void swiglu_grad_row(float* da, float* db, const In* a, const In* b, const In* dg, float w,
                            int64_t M) {
#pragma omp simd
  for (int64_t m = 0; m < M; ++m) {
    const float x = widen(a[m]), y = widen(b[m]);
    const float s = sigmoid_approx(x);
    const float dgw = widen(dg[m]) * w;
    da[m] = dgw * y * s * (1.0f + x * (1.0f - s));
    db[m] = dgw * x * s;
  }
}

// swiglu_forward, or with gq: swiglu_forward_quantized; with row_ids, over rows row_ids[0, rows) only
// (swiglu_forward_at).
inline void swiglu_forward_rows_of(void* g, Dtype g_dt, int8_t* gq, float* g_scale, GateUp in, Dtype dt,
                                   const int64_t* row_ids, int64_t rows, int64_t M, const float* row_weight) {
  check_swiglu_dtype(dt);
  const size_t elem = dtype_size(dt), g_elem = dtype_size(g_dt);
#pragma omp parallel
  {
    std::vector<float> g_buf(static_cast<size_t>(M));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = row_ids ? row_ids[i] : i;
      const char* a = static_cast<const char*>(in.a) + size_t(r * in.ld) * elem;
      const char* b = static_cast<const char*>(in.b) + size_t(r * in.ld) * elem;
      const float w = row_weight ? row_weight[r] : 1.0f;
      float* out = g_buf.data();
      if (dt == Dtype::bf16)
        swiglu_row(out, reinterpret_cast<const bf16_t*>(a), reinterpret_cast<const bf16_t*>(b), w, M);
      else if (dt == Dtype::f16)
        swiglu_row(out, reinterpret_cast<const f16_t*>(a), reinterpret_cast<const f16_t*>(b), w, M);
      else
        swiglu_row(out, reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), w, M);
      char* g_row = static_cast<char*>(g) + size_t(r * M) * g_elem;
      store_row(g_row, g_dt, out, M);
      if (!gq) continue;
      // The row as stored (rounded to g_dt) is what the reference and quantize_rows(g) quantize; it is
      // still in L1.
      g_scale[r] = quantize_block(gq + r * M, g_row, g_dt, 0, M);
    }
  }
}

inline void swiglu_forward_plain(void* g, Dtype g_dt, GateUp in, Dtype dt, int64_t rows, int64_t M,
                                 const float* row_weight) {
  swiglu_forward_rows_of(g, g_dt, nullptr, nullptr, in, dt, nullptr, rows, M, row_weight);
}

inline void swiglu_forward_quantized_rows(void* g, Dtype g_dt, int8_t* gq, float* g_scale, GateUp in,
                                          Dtype dt, int64_t rows, int64_t M, const float* row_weight) {
  swiglu_forward_rows_of(g, g_dt, gq, g_scale, in, dt, nullptr, rows, M, row_weight);
}

inline void swiglu_forward_at_rows(void* g, Dtype g_dt, GateUp in, Dtype dt, const int64_t* row_ids,
                                   int64_t count, int64_t M, const float* row_weight) {
  swiglu_forward_rows_of(g, g_dt, nullptr, nullptr, in, dt, row_ids, count, M, row_weight);
}

inline void swiglu_backward_rows(GateUpGrad out, Dtype out_dt, const void* dg, GateUp in, Dtype dt,
                                 int64_t rows, int64_t M, const float* row_weight) {
  check_swiglu_dtype(dt);
  const size_t elem = dtype_size(dt), out_elem = dtype_size(out_dt);
  // dh (rows, 2M) is read next by GEMMs, after it has left the caches: its lines go out unfetched.
  const bool stream = size_t(rows * M) * 2 * out_elem >= kStreamRowsBytes &&
                      streams_bf16_rows(out_dt, M, out.da) && streams_bf16_rows(out_dt, M, out.db) &&
                      streams_lines(out.da, size_t(out.ld) * out_elem);
#pragma omp parallel
  {
    std::vector<float> da(static_cast<size_t>(M)), db(static_cast<size_t>(M));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const char* a = static_cast<const char*>(in.a) + size_t(r * in.ld) * elem;
      const char* b = static_cast<const char*>(in.b) + size_t(r * in.ld) * elem;
      const char* d = static_cast<const char*>(dg) + size_t(r * M) * elem;
      const float w = row_weight ? row_weight[r] : 1.0f;
      float* pa = da.data();
      float* pb = db.data();
      if (dt == Dtype::bf16)
        swiglu_grad_row(pa, pb, reinterpret_cast<const bf16_t*>(a), reinterpret_cast<const bf16_t*>(b),
                        reinterpret_cast<const bf16_t*>(d), w, M);
      else if (dt == Dtype::f16)
        swiglu_grad_row(pa, pb, reinterpret_cast<const f16_t*>(a), reinterpret_cast<const f16_t*>(b),
                        reinterpret_cast<const f16_t*>(d), w, M);
      else
        swiglu_grad_row(pa, pb, reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b),
                        reinterpret_cast<const float*>(d), w, M);
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
  return {&swiglu_forward_plain, &swiglu_backward_rows, &swiglu_forward_quantized_rows,
          &swiglu_forward_at_rows};
}

}  // namespace MOE_VEC_ISA
}  // namespace moe::cpu

// Defines `name`, a level's entry in swiglu_isa.h, as this file's passes (in moe::cpu, outside the target
// pragma).
#define MOE_DEFINE_SWIGLU_PASSES(name) \
  SwigluPasses name() {                \
    return swiglu_passes_here();       \
  }
