// The seed's loss gradient on the GPU (loss = mean(y^2)): dy = 2 y / n, and the sum of squares in
// float64, reduced in a fixed order (per-block partials, then one block) so the loss is the same on
// every run. Reference: the ref backend's loss_backward.
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

// Sums `v` over the block in shared memory, in a fixed tree order; thread 0 gets the total.
__device__ double block_sum(double v) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  return part[0];
}

template <typename Y>
__global__ void loss_partials(float* __restrict__ dy, double* __restrict__ partials, const Y* __restrict__ y,
                              int64_t n, int64_t count) {
  double sum = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const double v = to_float(y[i]);
    sum += v * v;
    dy[i] = float(2.0 * v / double(count));
  }
  const double total = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void loss_total(double* __restrict__ sum_sq, const double* __restrict__ partials, int count) {
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) sum += partials[i];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) *sum_sq = total;
}

}  // namespace

void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count, Tensor& partials) {
  MOE_CHECK(dy.dtype() == Dtype::f32 && sum_sq.dtype() == Dtype::f64 && partials.numel() >= kLossPartials,
            "cuda loss: dy f32, sum_sq f64");
  const int64_t n = y.numel();
  const cudaStream_t stream = device().stream;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, kLossPartials));
  if (blocks > 0)
    visit_float(y.dtype(), "cuda loss", [&](auto tag) {
      using Y = decltype(tag);
      loss_partials<Y><<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<float*>(dy.raw()),
                                                                  static_cast<double*>(partials.raw()),
                                                                  static_cast<const Y*>(y.raw()), n, count);
    });
  CUDA_CHECK(cudaGetLastError());
  loss_total<<<1, kThreads, 0, stream>>>(static_cast<double*>(sum_sq.raw()),
                                         static_cast<const double*>(partials.raw()), blocks);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
