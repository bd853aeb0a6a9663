// The instance of a set of passes compiled per ISA level (swiglu_isa.h, quantize_isa.h) that this CPU
// runs: the best level isa_level() reaches (AVX-512 without BF16 runs the AVX2 one).
#pragma once

#include "moe/cpu_isa.h"

namespace moe::cpu {

template <typename Passes>
Passes best_passes_here(Passes (*baseline)(), Passes (*avx2)(), Passes (*avx512_bf16)()) {
  switch (isa_level()) {
    case IsaLevel::amx:
    case IsaLevel::avx512_bf16:
      return avx512_bf16();
    case IsaLevel::avx512:
    case IsaLevel::avx2:
      return avx2();
    case IsaLevel::baseline:
      break;
  }
  return baseline();
}

}  // namespace moe::cpu
