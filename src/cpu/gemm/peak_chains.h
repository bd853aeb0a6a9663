// The register-resident loop every peak kernel (cpu/gemm/peak.h) runs: kPeakChains independent accumulator
// chains, each one instruction a step (their count covers the instruction's latency times its ports).
// Include after the ISA's target pragma with MOE_PEAK_NS naming that ISA's namespace, so that the loop is
// that ISA's code (docs/design.md, "ISA levels").
#pragma once

#include <cstdint>

namespace MOE_PEAK_NS {

constexpr int kPeakChains = 12;

// acc[i] = step(acc[i]) for every chain, `steps` times.
template <class Acc, class Step>
[[gnu::always_inline]] inline void run_chains(Acc (&acc)[kPeakChains], int64_t steps, Step step) {
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < kPeakChains; ++i) acc[i] = step(acc[i]);
  }
}

}  // namespace MOE_PEAK_NS
