// --check: compare one fast-path run with the float64 reference on the same inputs and routing.
// Errors are norm-wise relative (reference.h relative_error); the gradient error is the worst over
// every differentiated tensor. Tolerances per dtype (docs/design.md):
//   float32  out 1e-5, grads 1e-5   (f32 accumulation, exp_approx ~1e-7)
//   bfloat16 out 2e-2, grads 2e-2   (bf16 storage of x, weights, h, g and row outputs: 2^-9 per rounding)
#pragma once

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {

double check_tolerance(Dtype dtype);

struct CheckResult {
  bool pass = false;
  double out_rel_err = 0;
  double grad_rel_err = -1;  // -1: forward pass, no gradients
  double tol = 0;
};

// grads == nullptr for a forward-only run.
CheckResult check_against_reference(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                    const Tensor& out, const MoeGrads* grads);

}  // namespace moe
