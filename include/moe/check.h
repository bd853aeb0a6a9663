// --check: compare one fast-path run with the float64 reference on the same inputs and routing.
// Errors are norm-wise relative (reference.h relative_error); the gradient error is the worst over
// every differentiated tensor. Tolerances per dtype (docs/design.md):
//   float32  out 1e-5, grads 1e-5   (f32 accumulation, exp_approx ~1e-7)
//   bfloat16 out 2e-2, grads 2e-2   (bf16 storage of x, weights, h, g and row outputs: 2^-9 per rounding)
//   float16  out 2.5e-3, grads 2.5e-3 (the same tensors in float16: 2^-12 per rounding, bf16's / 8)
// A run with int8 GEMMs (routed, or the shared expert's) raises the floor to kInt8CheckTolerance: the fast
// path and the reference quantize the same values, but an intermediate (g, dy, dh) that float32 and float64
// round a hair apart lands on the other side of a rounding boundary now and then, and that element moves by a
// whole quantization step (1/127 of its row's largest value). One such step moved a float32 dx by 1.2e-4 at
// T=256 H=64 and by up to 3.2e-3 at the tests' T=37 H=24 (2 configurations in 301 seeds over 1e-3, none over
// 3.2e-3). A run that skipped quantizing is off by 1.4e-2 or more at that shape (3.6x this floor;
// tests/test_block.cpp checks that it fails), and quantization's error does not shrink with the shape while
// one step's effect does.
#pragma once

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {

double check_tolerance(Dtype dtype);
inline constexpr double kInt8CheckTolerance = 4e-3;
// The floor of a run of cfg: its dtype's, raised where it has int8 GEMMs.
double check_tolerance(const MoeConfig& cfg);

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
