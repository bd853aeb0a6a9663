// Dispatch on the GPU: the gather into the expert-major row buffer (direct_take, and repeat_sort's
// materialised repeat) and the backward sum of row gradients into tokens (scatter: one atomicAdd per
// element in row order, so float sums may differ from run to run in the last bits; gather: per token
// through assignment_row, deterministic). Rows past the plan's group_offset[E] are left untouched;
// padding rows are written as zeros. Reference: src/ref/dispatch.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ T zero_of() {
  return T(0.0f);
}
template <>
__device__ __forceinline__ uint4 zero_of<uint4>() {
  return make_uint4(0, 0, 0, 0);
}

// Where a plan's rows come from: row r < group_offset[E] holds assignment row_assignment[r] = t * topk + k of
// token t, or -1 (a padding row); rows past group_offset[E] are not the plan's.
struct RowSources {
  static constexpr int64_t kPadding = -1, kPastRows = -2;
  const int32_t* row_assignment;  // (max_rows)
  const int64_t* group_offset;    // (E + 1)
  int64_t experts, topk;

  // The token row r comes from, kPadding or kPastRows.
  __device__ int64_t token_of(int64_t r) const {
    if (r >= group_offset[experts]) return kPastRows;
    const int32_t a = row_assignment[r];
    return a < 0 ? kPadding : a / topk;
  }
};

RowSources row_sources(const DispatchPlan& plan, int64_t topk) {
  return {static_cast<const int32_t*>(plan.row_assignment.raw()),
          static_cast<const int64_t*>(plan.group_offset.raw()), plan.experts, topk};
}

// x_rows (max_rows, H) <- x (T, H): each plan row copies its token's row, padding rows are zeros, rows past
// the plan skip. T is the element type, or uint4 (16 bytes) where rows are whole multiples of it.
template <typename T>
__global__ void gather_rows(T* __restrict__ x_rows, const T* __restrict__ x, RowSources from, int64_t H) {
  const int64_t r = blockIdx.x, t = from.token_of(r);
  if (t == RowSources::kPastRows) return;
  T* dst = x_rows + r * H;
  if (t == RowSources::kPadding) {
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dst[h] = zero_of<T>();
    return;
  }
  const T* src = x + t * H;
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
__global__ void scatter_add_rows(float* __restrict__ dx, const float* __restrict__ dx_rows, RowSources to,
                                 int64_t H) {
  const int64_t r = blockIdx.x, t = to.token_of(r);
  if (t < 0) return;  // a padding row or past the plan
  float* dst = dx + t * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) atomicAdd(dst + h, dx_rows[r * H + h]);
}

// dx[t] = start[t] (or 0) + sum over k of dx_rows[assignment_row[t*K + k]] (live rows only), summed in
// f32 and stored once in dx's dtype; one block per token, V elements per thread per step. start may be
// dx itself.
template <int V, typename Out>
__global__ void gather_sum_rows(Out* dx, const float* start, const float* __restrict__ dx_rows,
                                const int32_t* __restrict__ assignment_row, int64_t topk, int64_t H) {
  const int64_t t = blockIdx.x;
  for (int64_t h = int64_t(threadIdx.x) * V; h < H; h += int64_t(blockDim.x) * V) {
    float sum[V] = {};
    if (start) load<V>(sum, start + t * H + h);
    for (int64_t k = 0; k < topk; ++k) {
      const int32_t r = assignment_row[t * topk + k];
      if (r < 0) continue;
      float v[V];
      load<V>(v, dx_rows + int64_t(r) * H + h);
#pragma unroll
      for (int i = 0; i < V; ++i) sum[i] += v[i];
    }
    store<V>(dx + t * H + h, sum);
  }
}

template <typename U>
void launch_gather_units(void* x_rows, const void* x, void* x_rep, const DispatchPlan& plan, int64_t units) {
  const int64_t A = plan.tokens * plan.topk;
  const cudaStream_t stream = device().stream;
  const int threads = threads_for_row(units, 1);
  if (x_rep) {
    if (A > 0)
      repeat_tokens<U><<<unsigned(A), threads, 0, stream>>>(static_cast<U*>(x_rep), static_cast<const U*>(x),
                                                            plan.topk, units);
    CUDA_CHECK(cudaGetLastError());
    // Row r of the repeat is assignment a itself: a gather with K = 1 over the repeated rows.
    gather_rows<U><<<unsigned(plan.max_rows), threads, 0, stream>>>(
        static_cast<U*>(x_rows), static_cast<const U*>(x_rep), row_sources(plan, 1), units);
  } else {
    gather_rows<U><<<unsigned(plan.max_rows), threads, 0, stream>>>(
        static_cast<U*>(x_rows), static_cast<const U*>(x), row_sources(plan, plan.topk), units);
  }
  CUDA_CHECK(cudaGetLastError());
}

// Rows move as 16-byte units where every row is a whole number of them (and the buffers aligned).
template <typename T>
void launch_gather(Tensor& x_rows, const Tensor& x, Tensor* x_rep, const DispatchPlan& plan) {
  const int64_t H = x.dim(1), row_bytes = H * int64_t(sizeof(T));
  if (plan.max_rows == 0) return;
  void* rep = x_rep ? x_rep->raw() : nullptr;
  const bool whole_units = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(x_rows.raw()) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(rep) % 16 == 0;
  if (whole_units)
    launch_gather_units<uint4>(x_rows.raw(), x.raw(), rep, plan, row_bytes / 16);
  else
    launch_gather_units<T>(x_rows.raw(), x.raw(), rep, plan, H);
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
      case Dtype::f16:
        return launch_gather<__half>(x_rows, x, rep, plan);
      case Dtype::f64:
      case Dtype::s8:
      case Dtype::s32:
      case Dtype::s64:
        break;
    }
    MOE_CHECK(false, "cuda dispatch: run dtype is float32, bfloat16 or float16 (supports() refuses others)");
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
      visit_float(dx.out.dtype(), "cuda dispatch backward", [&](auto tag) {
        using Out = decltype(tag);
        visit_width(H, {dx.out.raw(), start, rows}, [&](auto v) {
          gather_sum_rows<v.value, Out><<<unsigned(plan.tokens), threads_for_row(H, v.value), 0, stream>>>(
              static_cast<Out*>(dx.out.raw()), start, rows, assignment_row, plan.topk, H);
        });
      });
      CUDA_CHECK(cudaGetLastError());
      return;
    }
    // The scatter adds into the f32 accumulator, then converts (atomics need f32 targets).
    if (!start) dx.acc.fill_zero();
    if (plan.max_rows > 0) {
      scatter_add_rows<<<unsigned(plan.max_rows), kThreads, 0, stream>>>(
          static_cast<float*>(dx.acc.raw()), static_cast<const float*>(dx_rows.raw()),
          row_sources(plan, plan.topk), H);
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
