// swiglu.h's passes per ISA level (swiglu_rows.h compiled for each): swiglu.cpp's entry points run the
// best one isa_level() allows; the tests run each one this CPU has against the reference.
#pragma once

#include "cpu/ops/swiglu.h"

namespace moe::cpu {

struct SwigluPasses {
  decltype(&swiglu_forward) forward;
  decltype(&swiglu_backward) backward;
  decltype(&swiglu_forward_quantized) forward_quantized;
  decltype(&swiglu_forward_at) forward_at;
};

// Each returns its level's passes; run them only where isa_level() reaches the level.
SwigluPasses baseline_swiglu_passes();
SwigluPasses avx2_swiglu_passes();
SwigluPasses avx512_bf16_swiglu_passes();
// The passes swiglu.h's functions run here: the best of the above isa_level() allows.
const SwigluPasses& swiglu_passes();

}  // namespace moe::cpu
