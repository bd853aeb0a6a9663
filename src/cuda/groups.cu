#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/groups.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

template <typename T>
__global__ void zero_padding(T* __restrict__ rows_buf, const int32_t* __restrict__ row_assignment,
                             int64_t width) {
  const int64_t r = blockIdx.x;
  if (row_assignment[r] >= 0) return;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) store(rows_buf + r * width + i, 0.0f);
}

}  // namespace

HostGroups::HostGroups(int64_t experts) : experts_(experts) {
  CUDA_CHECK(cudaMallocHost(&host_, sizeof(int64_t) * size_t(2 * experts + 1)));
}

HostGroups::~HostGroups() {
  if (host_) cudaFreeHost(host_);
}

void HostGroups::read(const DispatchPlan& plan) {
  MOE_CHECK(plan.experts == experts_, "HostGroups read a plan of another expert count");
  const cudaStream_t stream = device().stream;
  CUDA_CHECK(cudaMemcpyAsync(host_, plan.group_offset.raw(), sizeof(int64_t) * size_t(experts_ + 1),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(host_ + experts_ + 1, plan.group_live.raw(), sizeof(int64_t) * size_t(experts_),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  has_padding_ = false;
  for (int64_t e = 0; e < experts_; ++e) has_padding_ |= offset(e + 1) - offset(e) > live(e);
}

void zero_padding_rows(Tensor& rows_buf, const DispatchPlan& plan, const HostGroups& groups) {
  const int64_t rows = groups.rows();
  if (rows == 0 || !groups.has_padding()) return;
  const int64_t width = rows_buf.dim(1);
  visit_float(rows_buf.dtype(), "zero_padding_rows", [&](auto tag) {
    using T = decltype(tag);
    zero_padding<T><<<unsigned(rows), 128, 0, device().stream>>>(
        static_cast<T*>(rows_buf.raw()), static_cast<const int32_t*>(plan.row_assignment.raw()), width);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
