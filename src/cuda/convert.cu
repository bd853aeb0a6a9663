// Element-wise conversion between float32, bfloat16 and float16 on the GPU (the block's output store, and
// the widening of 16-bit operands where a float32 GEMM needs them).
#include <algorithm>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

template <typename In, typename Out>
__global__ void convert_kernel(Out* __restrict__ dst, const In* __restrict__ src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(dst + i, to_float(src[i]));
}

}  // namespace

void convert(void* dst, Dtype dst_dtype, const void* src, Dtype src_dtype, int64_t n) {
  if (n == 0) return;
  visit_float(src_dtype, "cuda convert", [&](auto in_tag) {
    visit_float(dst_dtype, "cuda convert", [&](auto out_tag) {
      using In = decltype(in_tag);
      using Out = decltype(out_tag);
      convert_kernel<In, Out>
          <<<grid_for(n), 256, 0, device().stream>>>(static_cast<Out*>(dst), static_cast<const In*>(src), n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void convert(Tensor& dst, const Tensor& src) {
  MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
  convert(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel());
}

}  // namespace moe::cuda
