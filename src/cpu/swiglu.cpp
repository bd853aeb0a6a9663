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
      store_row(static_cast<char*>(out.da) + size_t(r * out.ld) * out_elem, out_dt, pa, M);
      store_row(static_cast<char*>(out.db) + size_t(r * out.ld) * out_elem, out_dt, pb, M);
    }
  }
}

}  // namespace moe::cpu
