#include "cpu/swiglu.h"

#include <vector>

#include "cpu/vec_math.h"

namespace moe::cpu {

void swiglu_forward(void* g, Dtype g_dt, GateUp in, Dtype dt, int64_t rows, int64_t M,
                    const float* row_weight) {
  const size_t elem = dtype_size(dt), g_elem = dtype_size(g_dt);
#pragma omp parallel
  {
    std::vector<float> a_buf(static_cast<size_t>(M)), b_buf(static_cast<size_t>(M)),
        g_buf(static_cast<size_t>(M));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* a =
          load_row_f32(a_buf.data(), static_cast<const char*>(in.a) + size_t(r * in.ld) * elem, dt, M);
      const float* b =
          load_row_f32(b_buf.data(), static_cast<const char*>(in.b) + size_t(r * in.ld) * elem, dt, M);
      const float w = row_weight ? row_weight[r] : 1.0f;
      float* out = g_buf.data();
#pragma omp simd
      for (int64_t m = 0; m < M; ++m) out[m] = a[m] * sigmoid_approx(a[m]) * b[m] * w;
      store_row(static_cast<char*>(g) + size_t(r * M) * g_elem, g_dt, out, M);
    }
  }
}

void swiglu_backward(GateUpGrad out, Dtype out_dt, const void* dg, GateUp in, Dtype dt, int64_t rows,
                     int64_t M, const float* row_weight) {
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
      const float* a =
          load_row_f32(a_buf.data(), static_cast<const char*>(in.a) + size_t(r * in.ld) * elem, dt, M);
      const float* b =
          load_row_f32(b_buf.data(), static_cast<const char*>(in.b) + size_t(r * in.ld) * elem, dt, M);
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

}  // namespace moe::cpu
