// The `cpu` backend: host memory, OpenMP kernels (src/cpu/) and oneDNN (or portable) GEMMs through the
// GEMM registry (moe/gemm.h). Synchronous: every op has finished when it returns.
#pragma once

#include "moe/backend.h"

namespace moe::cpu {

Backend& cpu_backend();

}  // namespace moe::cpu
