// Element-wise conversion between float32 and bfloat16 on the GPU (the block's output store).
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"

namespace moe::cuda {
namespace {

__device__ float to_float(float v) {
  return v;
}
__device__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename Out>
__device__ Out from_float(float v);
template <>
__device__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename In, typename Out>
__global__ void convert_kernel(Out* __restrict__ dst, const In* __restrict__ src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<Out>(to_float(src[i]));
}

template <typename In, typename Out>
void launch(Tensor& dst, const Tensor& src) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 4096));
  convert_kernel<In, Out><<<blocks, 256, 0, device().stream>>>(static_cast<Out*>(dst.raw()),
                                                               static_cast<const In*>(src.raw()), n);
  CUDA_CHECK(cudaGetLastError());
}

template <typename In>
void launch_to(Tensor& dst, const Tensor& src) {
  switch (dst.dtype()) {
    case Dtype::f32:
      return launch<In, float>(dst, src);
    case Dtype::bf16:
      return launch<In, __nv_bfloat16>(dst, src);
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("cuda convert writes float32 or bfloat16, not ") + dtype_name(dst.dtype()));
}

}  // namespace

void convert(Tensor& dst, const Tensor& src) {
  MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
  switch (src.dtype()) {
    case Dtype::f32:
      return launch_to<float>(dst, src);
    case Dtype::bf16:
      return launch_to<__nv_bfloat16>(dst, src);
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("cuda convert reads float32 or bfloat16, not ") + dtype_name(src.dtype()));
}

}  // namespace moe::cuda
