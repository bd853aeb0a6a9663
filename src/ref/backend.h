// The `ref` backend: every op of moe/ops.h written plainly (src/ref/ref.h) in host memory. It runs
// every configuration the block accepts, slowly, and is what the other backends are tested against.
#pragma once

#include <memory>

#include "moe/backend.h"

namespace moe::ref {

std::unique_ptr<Backend> make_ref_backend(const KernelConfig& kernel);

}  // namespace moe::ref
