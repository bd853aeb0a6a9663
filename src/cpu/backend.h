// The `cpu` backend: host memory, OpenMP kernels (src/cpu/) and GEMMs through its kernel table
// (moe/gemm.h), one per KernelConfig, with auto's tuning files. Synchronous: every op has finished when it
// returns.
#pragma once

#include "moe/backend.h"
#include "moe/gemm.h"

namespace moe::cpu {

Backend& cpu_backend();
// The cpu backend's kernel table for `kernel` (made on first use, kept for the process: auto's measured
// choices live in it). REQUIRES: check_gemm_variant(kernel.gemm_variant) is ok.
GemmKernels& cpu_gemm_kernels(const KernelConfig& kernel);

}  // namespace moe::cpu
