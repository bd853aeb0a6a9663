// --check with a tolerance that follows the computation's conditioning. check.h's fixed per-dtype
// tolerance (2e-2 for bfloat16) fails correct runs on tiny, ill-conditioned problems: with a shared
// expert of width 1 or 2 and T = 2, a shared weight's gradient is a sum of two products that nearly
// cancel, and one bf16 rounding of an intermediate moves it by 5-8 % while float32 agrees to 2e-6.
//
// The rule, per checked tensor i (out, then every gradient), error e_i = ||fast - ref|| / ||ref||:
//   tol_i = max(check_tolerance(dtype), a(T) * s_i),  a(T) = 5 * max(1, sqrt(32 / T))
//   s_i   = max over 3 draws of ||ref_i(p') - ref_i(p)|| / ||ref_i(p)||
// where p' is every input value (x, w1, w2, w3, shared weights) multiplied by (1 + u * r), r uniform
// in [-1, 1], u = twice the dtype's unit roundoff (bf16 2^-8, f32 2^-23). s_i is the tensor's measured
// sensitivity to rounding-sized noise, its condition number times u: it grows with cancellation and
// short sums. Input noise is smoother than the rounding of intermediates (h, g, the output the
// backward starts from), so s_i can understate the real error by a few times, most when few tokens
// feed each sum: a(T) covers that (the sums over tokens are the short accumulations; 5 x for T >= 32).
// Calibration (docs/design.md): no correct run failed over 172,800 bf16 and 46,080 f32 tiny
// configurations (T 1..64, H 8/40, M 4/12, E 1/3, S 0..2, three impls, both backends, remat, null
// routing, capacity drop),
// worst e/tol 0.64; at ordinary shapes s_i is ~5e-3 in bf16, so tol stays near the floor and a lost
// token row (8 % of out at T = 37) or a wrong-signed gradient still fails.
// The perturbed references run only when some tensor exceeds the floor, so a passing check costs one
// reference run, as before.
#pragma once

#include <string>
#include <vector>

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {

constexpr double kConditioningFactor = 5.0;
constexpr int64_t kShortAccumulation = 32;
constexpr int kPerturbations = 3;

// a(T) above.
double conditioning_factor(int64_t tokens);

struct TensorCheck {
  std::string name;  // out, grad_x, grad_w1, grad_w3, grad_w2, grad_shared_w1/w3/w2
  double rel_err = 0;
  double sensitivity = 0;  // s_i; 0 when not measured (every tensor within the floor)
  double tol = 0;
};

struct ConditionedCheck {
  bool pass = false;
  std::vector<TensorCheck> tensors;
  double out_rel_err = 0;
  double grad_rel_err = -1;  // the worst gradient; -1: forward pass
  TensorCheck worst;         // the tensor closest to (or furthest over) its tolerance
};

// grads == nullptr for a forward-only run.
ConditionedCheck check_conditioned(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                   const Tensor& out, const MoeGrads* grads);

}  // namespace moe
