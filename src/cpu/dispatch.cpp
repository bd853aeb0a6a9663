#include "cpu/dispatch.h"

#include <cstring>
#include <vector>

#include "cpu/combine.h"
#include "cpu/vec_math.h"

namespace moe::cpu {

void dispatch_gather_direct(void* x_rows, const void* x, Dtype dt, const DispatchPlan& plan, int64_t H) {
  const size_t row_bytes = size_t(H) * dtype_size(dt);
  auto* dst = static_cast<char*>(x_rows);
  auto* src = static_cast<const char*>(x);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < plan.rows; ++r) {
    int32_t t = plan.row_token(r);
    if (t < 0)
      std::memset(dst + size_t(r) * row_bytes, 0, row_bytes);
    else
      std::memcpy(dst + size_t(r) * row_bytes, src + size_t(t) * row_bytes, row_bytes);
  }
}

void dispatch_gather_repeat(void* x_rows, void* x_rep, const void* x, Dtype dt, const DispatchPlan& plan, int64_t H) {
  const size_t row_bytes = size_t(H) * dtype_size(dt);
  const int64_t A = plan.tokens * plan.topk;
  auto* rep = static_cast<char*>(x_rep);
  auto* src = static_cast<const char*>(x);
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < A; ++a)
    std::memcpy(rep + size_t(a) * row_bytes, src + size_t(a / plan.topk) * row_bytes, row_bytes);
  auto* dst = static_cast<char*>(x_rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < plan.rows; ++r) {
    int32_t a = plan.row_assignment[size_t(r)];
    if (a < 0)
      std::memset(dst + size_t(r) * row_bytes, 0, row_bytes);
    else
      std::memcpy(dst + size_t(r) * row_bytes, rep + size_t(a) * row_bytes, row_bytes);
  }
}

namespace {

void dispatch_backward_gather(float* dx, const void* dx_rows, Dtype dt, const DispatchPlan& plan, int64_t H) {
  const int64_t K = plan.topk;
  const size_t elem = dtype_size(dt);
  auto* rows = static_cast<const char*>(dx_rows);
#pragma omp parallel
  {
    std::vector<float> scratch(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < plan.tokens; ++t) {
      float* dst = dx + t * H;
      for (int64_t k = 0; k < K; ++k) {
        int32_t r = plan.assignment_row[size_t(t * K + k)];
        if (r < 0) continue;
        const float* src = load_row_f32(scratch.data(), rows + size_t(r) * size_t(H) * elem, dt, H);
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) dst[h] += src[h];
      }
    }
  }
}

}  // namespace

void dispatch_backward(float* dx, const void* dx_rows, Dtype dt, const DispatchPlan& plan, int64_t H,
                       DispatchBackwardKind kind) {
  if (kind == DispatchBackwardKind::gather) return dispatch_backward_gather(dx, dx_rows, dt, plan, H);
  // Row-order scatter-add: the combine's scatter does exactly this with weight 1.
  add_rows_to_tokens(dx, dx_rows, dt, plan, H, nullptr);
}

}  // namespace moe::cpu
