// The GPU the cuda backend runs on (device 0), found once, and its stream.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace moe::cuda {

struct Device {
  bool available = false;
  std::string why_not;  // when not available: what the runtime said
  std::string name;     // e.g. "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;
  size_t memory_bytes = 0;
  cudaStream_t stream = nullptr;
};

// The first call probes the runtime; later calls return the same answer.
const Device& device();

}  // namespace moe::cuda
