#include "cpu/combine.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/vec_math.h"

namespace moe::cpu {

void add_rows_to_tokens(float* out, const void* rows_in, Dtype dt, const DispatchPlan& plan, int64_t H,
                        const float* row_weight) {
  const size_t elem = dtype_size(dt);
  auto* rows = static_cast<const char*>(rows_in);
#pragma omp parallel
  {
    // Column slices are multiples of 16 floats so threads never share a cache line of `out`.
    const int n_threads = omp_get_num_threads();
    const int64_t slice = (H / n_threads + 15) / 16 * 16;
    const int64_t c0 = std::min<int64_t>(H, slice * omp_get_thread_num());
    const int64_t c1 = omp_get_thread_num() == n_threads - 1 ? H : std::min<int64_t>(H, c0 + slice);
    const int64_t width = c1 - c0;
    std::vector<float> scratch(static_cast<size_t>(std::max<int64_t>(width, 1)));
    for (int64_t r = 0; r < plan.rows && width > 0; ++r) {
      int32_t a = plan.row_assignment[size_t(r)];
      if (a < 0) continue;
      const float w = row_weight ? row_weight[r] : 1.0f;
      const float* src =
          load_row_f32(scratch.data(), rows + (size_t(r) * size_t(H) + size_t(c0)) * elem, dt, width);
      float* dst = out + int64_t(a / plan.topk) * H + c0;
#pragma omp simd
      for (int64_t h = 0; h < width; ++h) dst[h] += w * src[h];
    }
  }
}

namespace {

float row_weight(const DispatchPlan& plan, const Routing& routing, int64_t r, CombineKind kind,
                 bool preweighted) {
  if (preweighted) return 1.0f;
  if (kind == CombineKind::scatter) return plan.row_weight[size_t(r)];
  return routing.weights[size_t(plan.row_assignment[size_t(r)])];
}

void combine_unsort(float* out, const void* y_rows, Dtype dt, const DispatchPlan& plan,
                    const Routing& routing, int64_t H, bool preweighted) {
  const int64_t K = plan.topk;
  const size_t elem = dtype_size(dt);
  auto* rows = static_cast<const char*>(y_rows);
#pragma omp parallel
  {
    std::vector<float> scratch(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < plan.tokens; ++t) {
      float* dst = out + t * H;
      for (int64_t k = 0; k < K; ++k) {
        int32_t r = plan.assignment_row[size_t(t * K + k)];
        if (r < 0) continue;
        const float w = preweighted ? 1.0f : routing.weights[size_t(t * K + k)];
        const float* src = load_row_f32(scratch.data(), rows + size_t(r) * size_t(H) * elem, dt, H);
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) dst[h] += w * src[h];
      }
    }
  }
}

}  // namespace

void combine_forward(float* out, const void* y_rows, Dtype dt, const DispatchPlan& plan,
                     const Routing& routing, int64_t H, CombineKind kind, bool preweighted) {
  if (kind == CombineKind::scatter)
    add_rows_to_tokens(out, y_rows, dt, plan, H, preweighted ? nullptr : plan.row_weight.data());
  else
    combine_unsort(out, y_rows, dt, plan, routing, H, preweighted);
}

void combine_backward(void* dy_rows, Dtype dt, const float* dy, const DispatchPlan& plan,
                      const Routing& routing, int64_t H, CombineKind kind, bool preweighted) {
  const size_t elem = dtype_size(dt);
  auto* dst_rows = static_cast<char*>(dy_rows);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < plan.rows; ++r) {
      char* dst = dst_rows + size_t(r) * size_t(H) * elem;
      int32_t t = plan.row_token(r);
      if (t < 0) {
        std::memset(dst, 0, size_t(H) * elem);
        continue;
      }
      const float w = row_weight(plan, routing, r, kind, preweighted);
      const float* src = dy + int64_t(t) * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) row[size_t(h)] = w * src[h];
      store_row(dst, dt, row.data(), H);
    }
  }
}

}  // namespace moe::cpu
