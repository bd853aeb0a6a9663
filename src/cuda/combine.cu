// Combine on the GPU without atomics: each token gathers its K rows through assignment_row and sums
// them in float32 in k order, stored once (deterministic); rows move in aligned vectors. The backward writes
// each row's weighted token gradient, padding rows zero. The weight is 1 for preweight impls (their rows
// carry it), the plan's run-dtype row weight for the scatter algorithm, and the float32 routing weight
// otherwise, as on the cpu. Reference: src/ref/combine.cpp.
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

enum class WeightFrom { one, row_weight, routing };

struct Weights {
  WeightFrom from;
  const float* row_weight;  // (max_rows)
  const float* routing;     // (T, K)
  __device__ float of(int64_t row, int64_t assignment) const {
    switch (from) {
      case WeightFrom::one:
        return 1.0f;
      case WeightFrom::row_weight:
        return row_weight[row];
      case WeightFrom::routing:
        return routing[assignment];
    }
    return 0.0f;
  }
};

// out[t] = start[t] (or 0) + sum over k of w * y_rows[assignment_row[t*K + k]]; one block per token,
// V elements per thread per step.
template <int V, typename Out, typename Y>
__global__ void combine_forward_kernel(Out* out, const float* start, const Y* __restrict__ y_rows,
                                       const int32_t* __restrict__ assignment_row, Weights weights,
                                       int64_t topk, int64_t H) {
  const int64_t t = blockIdx.x;
  for (int64_t h = int64_t(threadIdx.x) * V; h < H; h += int64_t(blockDim.x) * V) {
    float sum[V] = {};
    if (start) load<V>(sum, start + t * H + h);
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t a = t * topk + k;
      const int32_t r = assignment_row[a];
      if (r < 0) continue;
      const float w = weights.of(r, a);
      float y[V];
      load<V>(y, y_rows + int64_t(r) * H + h);
#pragma unroll
      for (int i = 0; i < V; ++i) sum[i] += w * y[i];
    }
    store<V>(out + t * H + h, sum);
  }
}

// dy_rows[r] = w * dy[token(r)], padding rows zero; rows past group_offset[E] untouched.
template <int V, typename D>
__global__ void combine_backward_kernel(D* __restrict__ dy_rows, const float* __restrict__ dy,
                                        const int32_t* __restrict__ row_assignment,
                                        const int64_t* __restrict__ group_offset, int64_t experts,
                                        Weights weights, int64_t topk, int64_t H) {
  const int64_t r = blockIdx.x;
  if (r >= group_offset[experts]) return;
  const int32_t a = row_assignment[r];
  const float w = a < 0 ? 0.0f : weights.of(r, a);
  const float* src = dy + (a < 0 ? 0 : a / topk) * H;
  for (int64_t h = int64_t(threadIdx.x) * V; h < H; h += int64_t(blockDim.x) * V) {
    float v[V] = {};
    if (a >= 0) {
      load<V>(v, src + h);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] *= w;
    }
    store<V>(dy_rows + r * H + h, v);
  }
}

class CudaCombine final : public CombineOp {
 public:
  explicit CudaCombine(const OpContext& ctx)
      : from_(impl_traits(ctx.cfg.impl).preweight ? WeightFrom::one
              : ctx.cfg.uses_scatter_combine()    ? WeightFrom::row_weight
                                                  : WeightFrom::routing) {}

  void forward(const TokenSums& out, const Tensor& y_rows, const DispatchPlan& plan,
               const RoutingTensors& routing) override {
    if (plan.tokens == 0) return;
    const int64_t H = out.out.dim(1);
    const float* start = out.acc_holds_start ? static_cast<const float*>(out.acc.raw()) : nullptr;
    visit_float(out.out.dtype(), "cuda combine", [&](auto out_tag) {
      visit_float(y_rows.dtype(), "cuda combine", [&](auto y_tag) {
        using Out = decltype(out_tag);
        using Y = decltype(y_tag);
        visit_width(H, {out.out.raw(), start, y_rows.raw()}, [&](auto v) {
          combine_forward_kernel<v.value, Out, Y>
              <<<unsigned(plan.tokens), threads_for_row(H, v.value), 0, device().stream>>>(
                  static_cast<Out*>(out.out.raw()), start, static_cast<const Y*>(y_rows.raw()),
                  static_cast<const int32_t*>(plan.assignment_row.raw()), weights(plan, routing), plan.topk,
                  H);
        });
      });
    });
    CUDA_CHECK(cudaGetLastError());
  }

  void backward(Tensor& dy_rows, const Tensor& dy, const DispatchPlan& plan,
                const RoutingTensors& routing) override {
    if (plan.max_rows == 0) return;
    const int64_t H = dy.dim(1);
    visit_float(dy_rows.dtype(), "cuda combine backward", [&](auto tag) {
      using D = decltype(tag);
      visit_width(H, {dy_rows.raw(), dy.raw()}, [&](auto v) {
        combine_backward_kernel<v.value, D>
            <<<unsigned(plan.max_rows), threads_for_row(H, v.value), 0, device().stream>>>(
                static_cast<D*>(dy_rows.raw()), static_cast<const float*>(dy.raw()),
                static_cast<const int32_t*>(plan.row_assignment.raw()),
                static_cast<const int64_t*>(plan.group_offset.raw()), plan.experts, weights(plan, routing),
                plan.topk, H);
      });
    });
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  Weights weights(const DispatchPlan& plan, const RoutingTensors& routing) const {
    return {from_, static_cast<const float*>(plan.row_weight.raw()),
            static_cast<const float*>(routing.weights.raw())};
  }

  WeightFrom from_;
};

}  // namespace

std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx) {
  return std::make_unique<CudaCombine>(ctx);
}

}  // namespace moe::cuda
