#include "cpu/dispatch.h"

#include <cstring>

#include "cpu/combine.h"

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

void dispatch_gather_repeat(void* x_rows, void* x_rep, const void* x, Dtype dt, const DispatchPlan& plan,
                            int64_t H) {
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

void dispatch_backward(float* dx, const void* dx_rows, Dtype dt, const DispatchPlan& plan, int64_t H,
                       DispatchBackwardKind kind) {
  // Both are the combine's algorithms with unit weights (preweighted rows need no routing weights).
  const Routing no_weights;
  combine_forward(dx, dx_rows, dt, plan, no_weights, H,
                  kind == DispatchBackwardKind::gather ? CombineKind::unsort : CombineKind::scatter,
                  /*preweighted=*/true);
}

}  // namespace moe::cpu
