// The `ref` backend: every op of moe/ops.h written plainly (src/ref/ref.h) in host memory. It runs
// every configuration the block accepts, slowly, and is what the other backends are tested against.
#pragma once

#include "moe/backend.h"

namespace moe::ref {

Backend& ref_backend();

}  // namespace moe::ref
