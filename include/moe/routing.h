// Synthetic routing (spec §2.2-2.4): router logits from a distribution, top-k, softmax over the K
// selected logits, and the host-side diagnostics the seed prints. Computed once per run, outside timing.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/config.h"
#include "moe/tensor.h"

namespace moe {

struct Routing {
  int64_t tokens = 0;          // T
  int64_t topk = 0;            // K
  int64_t experts = 0;         // E (real experts; ids >= E are null slots, issue 4)
  std::vector<int32_t> ids;    // ids     (T, K) expert per assignment, descending logit order
  std::vector<float> weights;  // weights (T, K) softmax over the K selected logits, f32
};

// A routing in a backend's memory, uploaded once per run outside timing (the seed's routing constants).
struct RoutingTensors {
  int64_t tokens = 0, topk = 0, experts = 0;
  Tensor ids;      // ids     (T, K) s32
  Tensor weights;  // weights (T, K) f32
};
RoutingTensors to_memory(const Routing& routing, MemorySpace& memory);

// Host kernels' view of a routing (either form; RoutingTensors must be host memory).
struct RoutingView {
  int64_t tokens = 0, topk = 0, experts = 0;
  const int32_t* ids = nullptr;    // (T, K)
  const float* weights = nullptr;  // (T, K)
};
RoutingView host_view(const Routing& routing);
RoutingView host_view(const RoutingTensors& routing);

// logits (T, E) f32 drawn from `key` (make_routing derives it from the seed and the distribution).
std::vector<float> sample_router_logits(const MoeConfig& cfg, Distribution dist, uint64_t key);

// Top-k over each row of logits (T, E): descending, ties to the lower expert index; weights = softmax
// of the K selected logits (max-subtracted, f32).
Routing route_topk(const std::vector<float>& logits, int64_t tokens, int64_t experts, int64_t topk);

// The seed's profile-harness routing (spec §5.5, impl ref_dp): p = softmax of each row of logits (T, E)
// over all E, then the top K of p (ids as route_topk's), weights p at them, rescaled to sum to 1 when
// `renormalize` (then equal to route_topk's up to rounding).
Routing route_softmax_topk(const std::vector<float>& logits, int64_t tokens, int64_t experts, int64_t topk,
                           bool renormalize);

// The key a run's router logits (and its null mask, null_routing.h) derive from:
// derive_key(derive_key(seed, kStreamRoute), distribution), independent of the other distributions run.
uint64_t distribution_key(const MoeConfig& cfg);

// The routing a run uses: top-k of logits drawn from distribution_key(cfg) (route_softmax_topk for impl
// ref_dp), then null routing when cfg.null_routing is active (null_routing.h). `null_stats` (optional)
// receives the null statistics.
struct NullRoutingStats;
Routing make_routing(const MoeConfig& cfg, NullRoutingStats* null_stats = nullptr);

// Routing built from explicit ids/weights (tests: all tokens on one expert, empty experts, ...).
Routing routing_from(int64_t tokens, int64_t topk, int64_t experts, std::vector<int32_t> ids,
                     std::vector<float> weights);

struct RunStats {
  double runs = 0, mean = 0, p95 = 0, max = 0;
};
struct LoadStats {
  double min = 0, max = 0, std = 0, cv = 0;
};
// Run-length encoding of the top-1 expert sequence (ids[:, 0]); p95 with linear interpolation.
RunStats run_stats(const Routing& r);
// counts = bincount over real ids only (null ids dropped); population std; cv = std/mean (0 if mean 0).
LoadStats load_stats(const Routing& r);
std::vector<int64_t> expert_counts(const Routing& r);  // (E)

}  // namespace moe
