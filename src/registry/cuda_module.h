// The cuda backend as the registry makes it: a stand-in that opens the cuda module (libmoe_cuda.so,
// beside the program, else on the loader's path; once per process) and makes its backend the first time
// anything but its name is asked, and forwards to the backend inside. Where the module or the CUDA runtime is
// missing, available() says so and every supports() refuses with that reason, as on a machine without a GPU.
#pragma once

#include <memory>

#include "moe/backend.h"

namespace moe {

std::unique_ptr<Backend> make_cuda_module_backend(const KernelConfig& kernel);

}  // namespace moe
