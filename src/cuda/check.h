// CUDA error checks: a failed runtime call is an invariant failure with the call and CUDA's message.
// Kernel launches are checked with cudaGetLastError() (never a device sync on a timed path).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "moe/status.h"

#define CUDA_CHECK(expr)                                                                                    \
  do {                                                                                                      \
    const cudaError_t moe_cuda_err_ = (expr);                                                               \
    MOE_CHECK(moe_cuda_err_ == cudaSuccess, std::string(#expr) + ": " + cudaGetErrorString(moe_cuda_err_)); \
  } while (0)
