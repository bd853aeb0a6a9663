// A run whose output or gradients hold a NaN or an infinity has no meaningful TF/s: it must not print
// a RESULT that looks normal. Checked on the last timed call's results, outside timing.
#pragma once

#include "moe/inputs.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe::bench {

// Counts NaN and +-inf values (f32, bf16 or f16).
int64_t count_non_finite(const Tensor& t);

// An error naming every non-finite tensor (out, then dx, dw1, ...) and its count; ok when all finite.
// grads: nullptr for a forward pass.
Status check_finite(const Tensor& out, const MoeGrads* grads);

}  // namespace moe::bench
