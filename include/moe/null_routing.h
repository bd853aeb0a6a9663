// Null routing (spec §8, issue 4): after top-k, a fraction f of the T*K assignments is sent to "null"
// slots (ids >= E) that no expert owns, emulating a router that may pick "no expert". Pack drops null
// ids from every group, so only real assignments reach the grouped GEMMs; their weights are 0, so the
// combine adds nothing for them. Applied once per run on the host, outside timing.
//
// Randomness: one uniform u[t,k] per assignment, counter t*K + k of null_routing_key(...).
//  independent      masks u[t,k] < f. The draw does not depend on f, so a larger f masks a superset.
//  take_until_null  keeps the first keep[t] = #{k : u[t,k] >= f} ~ Binomial(K, 1-f) assignments (the
//                   highest logits) and masks the suffix. Counting the same uniforms (instead of a
//                   separate key) makes both modes null exactly as many assignments per token, so the
//                   modes differ only in which assignments go null; masks are nested across f here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/config.h"
#include "moe/routing.h"
#include "moe/status.h"

namespace moe {

struct NullRoutingStats {
  double target = 0;             // f
  double realized = 0;           // masked assignments / (T*K), after the keep-one-real fix
  int64_t null_experts = 0;      // M0 used (0 when f <= 0)
  int64_t null_assignments = 0;  // count(ids >= E) afterwards
  int64_t real_assignments = 0;  // T*K - null_assignments
};

// f in [0, 1) (the seed's message otherwise) and null_experts >= 0.
Status validate(const NullRoutingConfig& cfg);

// The mask key: independent of the routing logits' stream, fixed per (seed, distribution, null seed).
uint64_t null_routing_key(uint64_t distribution_key, uint64_t null_route_seed);

// Rewrites routing in place (spec §8): masked assignments get id E + ((t*K + k) % M0) and weight 0;
// with renormalize, each token's weights are divided by their sum where it is > 0. If every
// assignment would be masked, [0, 0] stays real. f <= 0 leaves the routing untouched.
// M0 = cfg.null_experts if > 0, else max(1, round_half_even(E*f / (1-f))).
// distribution_key: the key the routing's logits came from (the mask uses
// null_routing_key(distribution_key, cfg.seed)). Precondition: validate(cfg) passes.
NullRoutingStats apply_null_routing(Routing& routing, const NullRoutingConfig& cfg,
                                    uint64_t distribution_key);

// The fractions a run sweeps, with the seed's precedence: the comma list when it names any value
// (blanks ignored), else the sweep 0.1..0.9 (i/10, i = 1..9) when `sweep`, else `single`. Every value
// is validated; on error `status` holds the one-line message and the result is empty.
std::vector<double> null_route_fractions(const std::string& list, bool sweep, double single, Status& status);

}  // namespace moe
