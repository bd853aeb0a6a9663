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

// The bytes a call must move at the least (the memory roofline's traffic): the weights of every expert
// that has a routed row (int8_routed_prequant's routed weights as int8, the others in the run dtype) and
// the shared expert's, read once per pass that multiplies by them, x read and out written; forward_backward
// reads the weights twice (forward and the data gradients), writes their gradients (run dtype) and reads
// x, out and writes dx once more. Intermediates (h, g, the dispatched rows) are not counted: a fused
// kernel need not write them.
inline double compulsory_bytes(const MoeConfig& c, int64_t experts_touched) {
  const double e = double(dtype_size(c.dtype));
  const double routed_elements = double(experts_touched) * 3.0 * double(c.hidden) * double(c.mlp_dim);
  const double shared_elements = 3.0 * double(c.hidden) * double(c.shared_expert_dim);
  const double routed_weight_bytes = c.quant_mode == QuantMode::int8_routed_prequant ? 1.0 : e;
  const double weights = routed_elements * routed_weight_bytes + shared_elements * e;
  const double activations = 2.0 * double(c.tokens) * double(c.hidden) * e;  // x in, out
  if (c.bench_pass == BenchPass::forward) return weights + activations;
  return 2.0 * weights + (routed_elements + shared_elements) * e + 2.0 * activations;
}

}  // namespace moe::bench
