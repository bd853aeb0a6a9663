// moe/quantize.h's cpu functions per ISA level (quantize_passes.h compiled for each): the functions run
// the best one isa_level() allows; the tests run each one this CPU has against the reference bit for bit.
#pragma once

#include "moe/quantize.h"

namespace moe::cpu {

struct QuantizePasses {
  decltype(&quantize_rows) rows;
  decltype(&quantize_experts) experts;
  decltype(&quantize_columns) columns;
  decltype(&quantize_token_rows) token_rows;
};

// Each returns its level's functions; run them only where isa_level() reaches the level.
QuantizePasses baseline_quantize_passes();
QuantizePasses avx2_quantize_passes();
QuantizePasses avx512_bf16_quantize_passes();
// The functions moe/quantize.h's cpu:: ones run here: the best of the above isa_level() allows.
const QuantizePasses& quantize_passes();

}  // namespace moe::cpu
