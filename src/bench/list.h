// --list: every registered backend with, for the configuration the other flags describe, which ops it
// runs; the impls, grouped-GEMM backends and GEMM kernel variants.
#pragma once

#include "moe/config.h"

namespace moe::bench {

void print_list(const MoeConfig& c);

}  // namespace moe::bench
