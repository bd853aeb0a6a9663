// FLOP accounting exactly as the seed (spec §9.2): routed FLOPs from real assignments (or E*cap
// rows under capacity=pad), shared expert FLOPs, x3 for forward_backward. Router, sort, gather,
// combine and remat recompute are not counted.
#pragma once

#include <cstdint>

#include "moe/config.h"

namespace moe::bench {

inline double seed_flops(const MoeConfig& c, int64_t real_assignments) {
  const double H = double(c.hidden), M = double(c.mlp_dim);
  double routed = c.capacity_active() && c.capacity_policy == CapacityPolicy::pad
                      ? 6.0 * H * M * double(c.experts) * double(c.capacity())
                      : 6.0 * H * M * double(real_assignments);
  double shared = 6.0 * double(c.tokens) * H * double(c.shared_expert_dim);
  double fwd = routed + shared;
  return c.bench_pass == BenchPass::forward ? fwd : 3.0 * fwd;
}

}  // namespace moe::bench
