// --list: every registered backend with, for the configuration the other flags describe, which ops it
// runs; the impls, grouped-GEMM backends and GEMM kernel variants.
#pragma once

#include "bench/probes/wait_policy.h"
#include "moe/config.h"

namespace moe::bench {

// `--peak`: each ISA's register-resident arithmetic peak and the memory bandwidth with the current threads,
// kept for the machine as the peaks rows read their bound against (machine_peaks.h).
void print_peaks(const KernelConfig& kernel);
// `wait` and `threads`: the OpenMP wait policy a run with these flags would choose now (--list itself
// executes nothing again).
void print_list(const MoeConfig& c, const KernelConfig& kernel, WaitPolicy wait, int threads);

}  // namespace moe::bench
