#include "moe/null_routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "moe/parse.h"
#include "moe/python_repr.h"
#include "moe/rng.h"

namespace moe {
namespace {

// Below this many assignments a parallel region costs more than the work it shares.
constexpr int64_t kParallelMin = int64_t(1) << 15;

Status validate_fraction(double f) {
  if (f >= 0 && f < 1) return Status::ok();  // written so that NaN fails too
  return Status::error(fmt::format("Invalid null-route fraction {}; expected in [0, 1).", python_float(f)));
}

// Python's round(): ties go to the even neighbour.
double round_half_even(double x) {
  if (std::abs(x - std::trunc(x)) == 0.5) return 2.0 * std::round(x / 2.0);
  return std::round(x);
}

int64_t null_slot_count(const NullRoutingConfig& cfg, int64_t E) {
  if (cfg.null_experts > 0) return cfg.null_experts;
  const double derived = round_half_even(double(E) * cfg.frac / (1.0 - cfg.frac));
  // f near 1 makes the formula overflow int64. Slot ids only see (t*K + k) % M0 < T*K < 2^31, so any
  // cap far above that changes no id and keeps the conversion defined.
  return std::max<int64_t>(1, int64_t(std::min(derived, 0x1p62)));
}

struct MaskParams {
  uint64_t key;
  double frac;
  int64_t E, K, M0;
  NullRoutingMode mode;
  bool renormalize;
};

// weights (K): divided by their sum where it is > 0 (an all-null token keeps its zeros).
void renormalize_token(float* weights, int64_t K) {
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) sum += weights[k];
  if (sum > 0.0f)
    for (int64_t k = 0; k < K; ++k) weights[k] /= sum;
}

// Masks token t's row: ids (K), weights (K). Returns the number of assignments sent to null.
int64_t null_route_token(int32_t* ids, float* weights, int64_t t, const MaskParams& p) {
  const int64_t a0 = t * p.K;
  int64_t keep = p.K;
  if (p.mode == NullRoutingMode::take_until_null) {
    keep = 0;
    for (int64_t k = 0; k < p.K; ++k) keep += random_uniform(p.key, uint64_t(a0 + k)) >= p.frac;
  }
  int64_t masked = 0;
  for (int64_t k = 0; k < p.K; ++k) {
    const bool null =
        p.mode == NullRoutingMode::independent ? random_uniform(p.key, uint64_t(a0 + k)) < p.frac : k >= keep;
    if (!null) continue;
    ids[k] = int32_t(p.E + (a0 + k) % p.M0);
    weights[k] = 0.0f;
    ++masked;
  }
  if (p.renormalize) renormalize_token(weights, p.K);
  return masked;
}

}  // namespace

const char* name(NullRoutingMode v) {
  return kNullRoutingModes.name(v);
}

std::optional<NullRoutingMode> parse_null_routing_mode(std::string_view s) {
  return kNullRoutingModes.parse(s);
}

Status validate(const NullRoutingConfig& cfg) {
  MOE_RETURN_IF_ERROR(validate_fraction(cfg.frac));
  if (cfg.null_experts < 0)
    return Status::error(
        fmt::format("invalid --null-experts={}: must be >= 0 (0 = derived)", cfg.null_experts));
  return Status::ok();
}

uint64_t null_routing_key(uint64_t distribution_key, uint64_t null_route_seed) {
  return derive_key(derive_key(distribution_key, kStreamNull), null_route_seed);
}

NullRoutingStats apply_null_routing(Routing& routing, const NullRoutingConfig& cfg,
                                    uint64_t distribution_key) {
  MOE_CHECK(validate(cfg).is_ok(), "apply_null_routing: invalid config (validate it first)");
  const int64_t T = routing.tokens, K = routing.topk, E = routing.experts, A = T * K;
  MOE_CHECK(int64_t(routing.ids.size()) == A && int64_t(routing.weights.size()) == A,
            "apply_null_routing: routing ids/weights must be (T, K)");
  NullRoutingStats stats;
  stats.target = cfg.frac;
  if (cfg.frac > 0) {
    const int64_t M0 = null_slot_count(cfg, E);
    MOE_CHECK(E + std::min(M0, A) - 1 <= std::numeric_limits<int32_t>::max(),
              "apply_null_routing: null slot ids overflow int32");
    stats.null_experts = M0;
    if (A > 0) {
      const MaskParams p{
          null_routing_key(distribution_key, cfg.seed), cfg.frac, E, K, M0, cfg.mode, cfg.renormalize};
      int32_t* ids = routing.ids.data();
      float* weights = routing.weights.data();
      // Kept aside because the keep-one-real fix below must undo [0, 0]'s masking after the fact.
      const int32_t first_id = ids[0];
      const float first_weight = weights[0];
      int64_t masked = 0;
#pragma omp parallel for schedule(static) reduction(+ : masked) if (A >= kParallelMin)
      for (int64_t t = 0; t < T; ++t) masked += null_route_token(ids + t * K, weights + t * K, t, p);
      if (masked == A) {
        // Every token is all-null, so token 0's other weights are 0 and [0, 0] alone renormalizes to 1.
        ids[0] = first_id;
        weights[0] = first_weight;
        if (cfg.renormalize) renormalize_token(weights, K);
        --masked;
      }
      stats.realized = double(masked) / double(A);
    }
  }
  stats.null_assignments =
      std::count_if(routing.ids.begin(), routing.ids.end(), [E](int32_t id) { return id >= E; });
  stats.real_assignments = A - stats.null_assignments;
  return stats;
}

std::vector<double> null_route_fractions(const std::string& list, bool sweep, double single, Status& status) {
  std::vector<double> fracs;
  status = parse_double_list("--null-route-frac-list", list, fracs);
  if (!status) return {};
  if (fracs.empty() && sweep)
    for (int i = 1; i <= 9; ++i) fracs.push_back(i / 10.0);
  if (fracs.empty()) fracs.push_back(single);
  for (double f : fracs) {
    status = validate_fraction(f);
    if (!status) return {};
  }
  return fracs;
}

}  // namespace moe
