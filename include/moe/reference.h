// The float64 reference of the whole MoE block: the spec, written plainly (spec §2.5, §3.3-3.5).
// It reads the same inputs (converted exactly to double) and the same routing as the fast path, but
// shares none of its code: it loops over tokens and their K assignments directly, applies capacity
// by ranking each assignment within its expert in flat order, and differentiates by hand.
// Loss = mean(square(y)) over the T*H outputs.
#pragma once

#include <vector>

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"

namespace moe {

struct ReferenceResult {
  std::vector<double> out;  // (T, H)
  double loss = 0;
  bool has_grads = false;
  std::vector<double> dx;    // (T, H)
  std::vector<double> dw1;   // (E, H, M)
  std::vector<double> dw3;   // (E, H, M)
  std::vector<double> dw2;   // (E, M, H)
  std::vector<double> dsw1;  // (H, S)
  std::vector<double> dsw3;  // (H, S)
  std::vector<double> dsw2;  // (S, H)
};

// Uses cfg.tokens, hidden, mlp_dim, experts, topk, shared_expert_dim, capacity_policy/factor.
// The impl, backend, layout and remat choices do not change the math, so the reference ignores them.
ReferenceResult reference_forward(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                  bool with_grads);

// Same, on explicit double parameters (for finite-difference checks of the reference backward).
struct ReferenceParams {
  std::vector<double> x, w1, w3, w2, sw1, sw3, sw2;
};
ReferenceParams reference_params(const MoeInputs& in);
ReferenceResult reference_forward(const MoeConfig& cfg, const ReferenceParams& p, const Routing& routing,
                                  bool with_grads);

// ||a - b||_2 / max(||b||_2, tiny): the error measure every test and --check uses.
double relative_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace moe
