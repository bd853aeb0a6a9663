// The `cuda` backend: every op of the block on one stream (CUB pack, cuBLAS expert GEMMs spread over
// side streams, element-wise kernels; docs/design.md, "cuda"). Registered whenever the build has CUDA;
// on a machine without a usable GPU every supports() answers with the reason (e.g. "no CUDA device:
// ...") and nothing touches the runtime further.
//
// Stream contract: every copy, fill and kernel is ordered on the backend's one stream; copies from
// and to the host return once the host buffer may be reused or read; synchronize() waits for the rest.
#pragma once

#include <memory>

#include "moe/backend.h"

namespace moe::cuda {

std::unique_ptr<Backend> make_cuda_backend(const KernelConfig& kernel);

}  // namespace moe::cuda
