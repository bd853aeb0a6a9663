#include "cuda/check.h"
#include "cuda/device.h"

namespace moe::cuda {

const Device& device() {
  static const Device d = [] {
    Device dev;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      dev.why_not = err != cudaSuccess ? std::string("no CUDA device (") + cudaGetErrorString(err) + ")"
                                       : std::string("no CUDA device (the runtime found none)");
      cudaGetLastError();  // clear the sticky error so later queries are clean
      return dev;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    dev.available = true;
    dev.name = prop.name;
    dev.sm_major = prop.major;
    dev.sm_minor = prop.minor;
    dev.memory_bytes = prop.totalGlobalMem;
    CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
    return dev;
  }();
  return d;
}

}  // namespace moe::cuda
