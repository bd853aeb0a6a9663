// --list: every registered backend with, for the configuration the other flags describe, which ops it
// runs; the impls, grouped-GEMM backends and GEMM kernel variants.
#pragma once

#include "moe/config.h"

namespace moe::bench {

// `--peak`: each ISA's register-resident arithmetic peak on this CPU with the current threads.
void print_peaks();
void print_list(const MoeConfig& c);

}  // namespace moe::bench
