// Dispatch on the GPU: the gather into the expert-major row buffer (direct_take, and repeat_sort's
// materialised repeat) and the backward sum of row gradients into tokens (scatter: one atomicAdd per
// element in row order, so float sums may differ from run to run in the last bits; gather: per token
// through assignment_row, deterministic). Rows past the plan's group_offset[E] are left untouched;
// padding rows are written as zeros. Reference: src/ref/dispatch.cpp.
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

// x_rows (max_rows, H) <- x (T, H): row r copies x[row_assignment[r] / K]; rows r >= group_offset[E] skip.
template <typename T>
__global__ void gather_rows(T* __restrict__ x_rows, const T* __restrict__ x,
                            const int32_t* __restrict__ row_assignment,
                            const int64_t* __restrict__ group_offset, int64_t experts, int64_t topk,
                            int64_t H) {
  const int64_t r = blockIdx.x;
  if (r >= group_offset[experts]) return;
  const int32_t a = row_assignment[r];
  T* dst = x_rows + r * H;
  if (a < 0) {
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dst[h] = T(0.0f);
    return;
  }
  const T* src = x + (a / topk) * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dst[h] = src[h];
}

// x_rep (A, H) = repeat(x, K) along rows.
template <typename T>
__global__ void repeat_tokens(T* __restrict__ x_rep, const T* __restrict__ x, int64_t topk, int64_t H) {
  const int64_t a = blockIdx.x;
  const T* src = x + (a / topk) * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) x_rep[a * H + h] = src[h];
}

// dx (T, H) += dx_rows (max_rows, H) over live rows, one atomicAdd per element.
__global__ void scatter_add_rows(float* __restrict__ dx, const float* __restrict__ dx_rows,
                                 const int32_t* __restrict__ row_assignment,
                                 const int64_t* __restrict__ group_offset, int64_t experts, int64_t topk,
                                 int64_t H) {
  const int64_t r = blockIdx.x;
  if (r >= group_offset[experts]) return;
  const int32_t a = row_assignment[r];
  if (a < 0) return;
  float* dst = dx + (a / topk) * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) atomicAdd(dst + h, dx_rows[r * H + h]);
}

__device__ void store_as(float* dst, float v) {
  *dst = v;
}
__device__ void store_as(__nv_bfloat16* dst, float v) {
  *dst = __float2bfloat16_rn(v);
}

// dx[t] = start[t] (or 0) + sum over k of dx_rows[assignment_row[t*K + k]] (live rows only), summed in
// f32 and stored once in dx's dtype; one block per token. start may be dx itself.
template <typename Out>
__global__ void gather_sum_rows(Out* __restrict__ dx, const float* start, const float* __restrict__ dx_rows,
                                const int32_t* __restrict__ assignment_row, int64_t topk, int64_t H) {
  const int64_t t = blockIdx.x;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
    float sum = start ? start[t * H + h] : 0.0f;
    for (int64_t k = 0; k < topk; ++k) {
      const int32_t r = assignment_row[t * topk + k];
      if (r >= 0) sum += dx_rows[int64_t(r) * H + h];
    }
    store_as(dx + t * H + h, sum);
  }
}

template <typename T>
void launch_gather(Tensor& x_rows, const Tensor& x, Tensor* x_rep, const DispatchPlan& plan) {
  const int64_t H = x.dim(1), A = plan.tokens * plan.topk;
  const cudaStream_t stream = device().stream;
  if (plan.max_rows == 0) return;
  if (x_rep) {
    if (A > 0)
      repeat_tokens<T><<<unsigned(A), kThreads, 0, stream>>>(static_cast<T*>(x_rep->raw()),
                                                             static_cast<const T*>(x.raw()), plan.topk, H);
    CUDA_CHECK(cudaGetLastError());
    // Row r of the repeat is assignment a itself: a gather with K = 1 over the repeated rows.
    gather_rows<T><<<unsigned(plan.max_rows), kThreads, 0, stream>>>(
        static_cast<T*>(x_rows.raw()), static_cast<const T*>(x_rep->raw()),
        static_cast<const int32_t*>(plan.row_assignment.raw()),
        static_cast<const int64_t*>(plan.group_offset.raw()), plan.experts, 1, H);
  } else {
    gather_rows<T><<<unsigned(plan.max_rows), kThreads, 0, stream>>>(
        static_cast<T*>(x_rows.raw()), static_cast<const T*>(x.raw()),
        static_cast<const int32_t*>(plan.row_assignment.raw()),
        static_cast<const int64_t*>(plan.group_offset.raw()), plan.experts, plan.topk, H);
  }
  CUDA_CHECK(cudaGetLastError());
}

class CudaDispatch final : public DispatchOp {
 public:
  explicit CudaDispatch(const OpContext& ctx)
      : dt_(ctx.cfg.dtype),
        permute_(ctx.cfg.permute_mode),
        gather_backward_(ctx.cfg.permute_mode == PermuteMode::repeat_sort && ctx.cfg.use_custom_sort_vjp) {
    if (permute_ == PermuteMode::repeat_sort)
      x_rep_ = ctx.backend.empty(dt_, {ctx.cfg.assignments(), ctx.cfg.hidden});
  }

  void forward(Tensor& x_rows, const Tensor& x, const DispatchPlan& plan) override {
    Tensor* rep = permute_ == PermuteMode::repeat_sort ? &x_rep_ : nullptr;
    switch (dt_) {
      case Dtype::f32:
        return launch_gather<float>(x_rows, x, rep, plan);
      case Dtype::bf16:
        return launch_gather<__nv_bfloat16>(x_rows, x, rep, plan);
      case Dtype::f64:
      case Dtype::s8:
      case Dtype::s32:
      case Dtype::s64:
        break;
    }
    MOE_CHECK(false, "cuda dispatch: run dtype is float32 or bfloat16 (supports() refuses others)");
  }

  void backward(const TokenSums& dx, const Tensor& dx_rows, const DispatchPlan& plan) override {
    MOE_CHECK(dx.acc.dtype() == Dtype::f32 && dx_rows.dtype() == Dtype::f32,
              "cuda dispatch backward sums f32 rows");
    const int64_t H = dx.out.dim(1);
    const cudaStream_t stream = device().stream;
    const float* start = dx.acc_holds_start ? static_cast<const float*>(dx.acc.raw()) : nullptr;
    if (gather_backward_) {
      if (plan.tokens == 0) return;
      const auto* rows = static_cast<const float*>(dx_rows.raw());
      const auto* assignment_row = static_cast<const int32_t*>(plan.assignment_row.raw());
      if (dx.out.dtype() == Dtype::f32)
        gather_sum_rows<<<unsigned(plan.tokens), kThreads, 0, stream>>>(
            static_cast<float*>(dx.out.raw()), start, rows, assignment_row, plan.topk, H);
      else
        gather_sum_rows<<<unsigned(plan.tokens), kThreads, 0, stream>>>(
            static_cast<__nv_bfloat16*>(dx.out.raw()), start, rows, assignment_row, plan.topk, H);
      CUDA_CHECK(cudaGetLastError());
      return;
    }
    // The scatter adds into the f32 accumulator, then converts (atomics need f32 targets).
    if (!start) dx.acc.fill_zero();
    if (plan.max_rows > 0) {
      scatter_add_rows<<<unsigned(plan.max_rows), kThreads, 0, stream>>>(
          static_cast<float*>(dx.acc.raw()), static_cast<const float*>(dx_rows.raw()),
          static_cast<const int32_t*>(plan.row_assignment.raw()),
          static_cast<const int64_t*>(plan.group_offset.raw()), plan.experts, plan.topk, H);
      CUDA_CHECK(cudaGetLastError());
    }
    if (!dx.out.same_storage(dx.acc)) convert(dx.out, dx.acc);
  }

 private:
  Dtype dt_;
  PermuteMode permute_;
  bool gather_backward_;
  Tensor x_rep_;  // x_rep (A, H) repeat_sort scratch
};

}  // namespace

std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx) {
  return std::make_unique<CudaDispatch>(ctx);
}

}  // namespace moe::cuda
