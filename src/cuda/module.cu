// The entry point of the cuda backend's module (libmoe_cuda.so): the registry opens the module at run time
// and asks this function for a backend made for a kernel configuration, which the caller owns and
// deletes (src/registry/cuda_module.cpp), so that a CPU-only binary maps no CUDA library. Its other symbols
// (the core: tensors, statuses, the registry's helpers) come from the program that opens it, which exports
// them.
#include "cuda/backend.h"

extern "C" moe::Backend* moe_make_cuda_backend(const moe::KernelConfig* kernel) {
  return moe::cuda::make_cuda_backend(*kernel).release();
}
