// Null routing (spec §8): the mask's statistics and structure per mode, the slot ids, weights and
// renormalization, the keep-one-real edge case, validation and the fraction list, and that pack, the
// dispatch plan and the float64 reference all treat null assignments as contributing nothing.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/ops/pack.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/pack.h"
#include "moe/reference.h"
#include "moe/rng.h"
#include "test_util.h"

namespace moe {
namespace {

constexpr NullRoutingMode kModes[] = {NullRoutingMode::independent, NullRoutingMode::take_until_null};

// Top-k routing of random logits; the mask never reads the logits, so any distribution serves.
Routing random_routing(int64_t T, int64_t K, int64_t E, uint64_t key) {
  MoeConfig cfg;
  cfg.tokens = T;
  cfg.experts = E;
  cfg.topk = K;
  return route_topk(sample_router_logits(cfg, Distribution::random, key), T, E, K);
}

NullRoutingConfig null_config(double frac, NullRoutingMode mode, bool renormalize = false,
                              int64_t null_experts = 0, uint64_t seed = 0) {
  return NullRoutingConfig{
      .frac = frac, .null_experts = null_experts, .seed = seed, .mode = mode, .renormalize = renormalize};
}

std::vector<char> null_mask(const Routing& r) {
  std::vector<char> mask(r.ids.size());
  for (size_t a = 0; a < r.ids.size(); ++a) mask[a] = r.ids[a] >= r.experts;
  return mask;
}

// --------------------------------------------------------------------------------- mask statistics

TEST(NullRouting, RealizedFractionMatchesTarget) {
  const uint64_t seed = testing::test_seed();
  // A = 2^19: the realized fraction's std is <= 0.0007, so 0.005 is > 7 sigma.
  const int64_t T = 131072, K = 4, E = 8;
  const Routing base = random_routing(T, K, E, seed);
  for (NullRoutingMode mode : kModes) {
    for (double f : {0.1, 0.5, 0.9}) {
      SCOPED_TRACE(std::string(name(mode)) + " f=" + std::to_string(f));
      Routing r = base;
      const NullRoutingStats s = apply_null_routing(r, null_config(f, mode), seed);
      EXPECT_EQ(s.target, f);
      EXPECT_NEAR(s.realized, f, 0.005);
      const std::vector<char> mask = null_mask(r);
      const auto nulls = int64_t(std::count(mask.begin(), mask.end(), 1));
      EXPECT_EQ(s.null_assignments, nulls);
      EXPECT_EQ(double(s.null_assignments) / double(T * K), s.realized);
      EXPECT_EQ(s.real_assignments, T * K - nulls);
    }
  }
}

TEST(NullRouting, MasksNestAcrossFractions) {
  const uint64_t seed = testing::test_seed();
  const Routing base = random_routing(2000, 4, 8, seed);
  for (NullRoutingMode mode : kModes) {
    std::vector<char> prev(base.ids.size(), 0);
    for (int i = 1; i <= 9; ++i) {
      SCOPED_TRACE(std::string(name(mode)) + " f=" + std::to_string(i / 10.0));
      Routing r = base;
      apply_null_routing(r, null_config(i / 10.0, mode), seed);
      const std::vector<char> mask = null_mask(r);
      for (size_t a = 0; a < mask.size(); ++a) ASSERT_TRUE(!prev[a] || mask[a]) << "a=" << a;
      prev = mask;
    }
  }
}

// The documented pairing: both modes count the same uniforms, so they null equally many per token.
TEST(NullRouting, ModesNullTheSameCountPerToken) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 3000, K = 6;
  const Routing base = random_routing(T, K, 8, seed);
  Routing ind = base, take = base;
  apply_null_routing(ind, null_config(0.45, NullRoutingMode::independent), seed);
  apply_null_routing(take, null_config(0.45, NullRoutingMode::take_until_null), seed);
  const std::vector<char> mi = null_mask(ind), mt = null_mask(take);
  for (int64_t t = 0; t < T; ++t)
    ASSERT_EQ(std::count(mi.begin() + t * K, mi.begin() + (t + 1) * K, 1),
              std::count(mt.begin() + t * K, mt.begin() + (t + 1) * K, 1))
        << "t=" << t;
}

TEST(NullRouting, TakeUntilNullMasksASuffixAndKeepsTheTopExperts) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 4000, K = 8;
  const Routing base = random_routing(T, K, 16, seed);
  for (double f : {0.2, 0.6}) {
    Routing r = base;
    apply_null_routing(r, null_config(f, NullRoutingMode::take_until_null), seed);
    for (int64_t t = 0; t < T; ++t) {
      bool seen_null = false;
      for (int64_t k = 0; k < K; ++k) {
        const size_t a = size_t(t * K + k);
        const bool null = r.ids[a] >= r.experts;
        ASSERT_FALSE(seen_null && !null) << "real after null at t=" << t << " k=" << k << " f=" << f;
        seen_null = seen_null || null;
        if (!null) {
          ASSERT_EQ(r.ids[a], base.ids[a]);
        }
      }
    }
  }
}

// Different null seeds and distribution keys give different masks; the same ones, the same mask on
// any thread count.
TEST(NullRouting, MaskIsAFunctionOfTheKeyAndNullSeed) {
  const uint64_t seed = testing::test_seed();
  const Routing base = random_routing(10000, 4, 8, seed);  // A above the parallel threshold
  auto mask_for = [&](uint64_t dist_key, uint64_t null_seed, int threads) {
    Routing r = base;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    apply_null_routing(r, null_config(0.5, NullRoutingMode::independent, false, 0, null_seed), dist_key);
    omp_set_num_threads(saved);
    return null_mask(r);
  };
  const std::vector<char> m = mask_for(seed, 7, 1);
  EXPECT_EQ(m, mask_for(seed, 7, 2));
  EXPECT_NE(m, mask_for(seed, 8, 1));
  EXPECT_NE(m, mask_for(seed + 1, 7, 1));
  EXPECT_EQ(null_routing_key(seed, 7), derive_key(derive_key(seed, kStreamNull), 7));
}

// ------------------------------------------------------------------------------ ids and weights

TEST(NullRouting, AllNullKeepsAssignmentZeroReal) {
  const uint64_t seed = testing::test_seed();
  const double f = std::nextafter(1.0, 0.0);  // every uniform is below it
  for (NullRoutingMode mode : kModes) {
    for (bool renormalize : {false, true}) {
      for (int64_t T : {1, 3}) {
        SCOPED_TRACE(std::string(name(mode)) + " renormalize=" + std::to_string(renormalize) +
                     " T=" + std::to_string(T));
        const int64_t K = 2, E = 4;
        const Routing base = random_routing(T, K, E, seed);
        Routing r = base;
        const NullRoutingStats s = apply_null_routing(r, null_config(f, mode, renormalize, 3), seed);
        EXPECT_EQ(s.real_assignments, 1);
        EXPECT_EQ(s.null_assignments, T * K - 1);
        EXPECT_EQ(s.realized, double(T * K - 1) / double(T * K));
        EXPECT_EQ(r.ids[0], base.ids[0]);
        EXPECT_EQ(r.weights[0], renormalize ? 1.0f : base.weights[0]);
        for (int64_t a = 1; a < T * K; ++a) {
          EXPECT_EQ(r.ids[size_t(a)], E + a % 3) << "a=" << a;
          EXPECT_EQ(r.weights[size_t(a)], 0.0f) << "a=" << a;
        }
      }
    }
  }
}

TEST(NullRouting, NullIdsCycleOverTheSlots) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 500, K = 4, E = 6;
  const Routing base = random_routing(T, K, E, seed);
  for (NullRoutingMode mode : kModes) {
    for (int64_t null_experts : {0, 1, 5}) {
      Routing r = base;
      const NullRoutingStats s = apply_null_routing(r, null_config(0.6, mode, false, null_experts), seed);
      const int64_t M0 = null_experts > 0 ? null_experts : 9;  // round(8.9999999999999982) = 9
      EXPECT_EQ(s.null_experts, M0);
      std::vector<int64_t> slot_uses(size_t(M0), 0);
      for (int64_t a = 0; a < T * K; ++a) {
        const int32_t id = r.ids[size_t(a)];
        if (id < E) continue;
        ASSERT_EQ(id, E + a % M0) << name(mode) << " a=" << a;
        ++slot_uses[size_t(id - E)];
      }
      EXPECT_TRUE(std::all_of(slot_uses.begin(), slot_uses.end(), [](int64_t n) { return n > 0; }));
    }
  }
}

TEST(NullRouting, DerivedSlotCountRoundsHalfToEven) {
  struct Case {
    int64_t E;
    double f;
    int64_t null_experts, M0;
  };
  const Case cases[] = {
      {3, 0.5, 0, 3},     // 3
      {1, 0.2, 0, 1},     // 0.25 -> 0 -> at least 1
      {2, 0.2, 0, 1},     // 0.5 -> 0 (even) -> at least 1
      {10, 0.2, 0, 2},    // 2.5 -> 2 (half-up would give 3)
      {14, 0.2, 0, 4},    // 3.5 -> 4
      {6, 0.2, 0, 2},     // 1.5000000000000002 -> 2
      {60, 0.9, 0, 540},  // 540.00000000000011 -> 540
      {8, 0.1, 0, 1},     // 0.888... -> 1
      {8, 0.5, 3, 3},     // explicit count wins
  };
  for (const Case& c : cases) {
    Routing r = routing_from(2, 1, c.E, {0, 0}, {1.0f, 1.0f});
    const NullRoutingStats s =
        apply_null_routing(r, null_config(c.f, NullRoutingMode::independent, false, c.null_experts), 1);
    EXPECT_EQ(s.null_experts, c.M0) << "E=" << c.E << " f=" << c.f;
  }
}

TEST(NullRouting, NullWeightsAreZeroAndRealWeightsUntouched) {
  const uint64_t seed = testing::test_seed();
  const Routing base = random_routing(1000, 4, 8, seed);
  for (NullRoutingMode mode : kModes) {
    Routing r = base;
    apply_null_routing(r, null_config(0.5, mode), seed);
    for (size_t a = 0; a < r.ids.size(); ++a) {
      if (r.ids[a] >= r.experts)
        ASSERT_EQ(r.weights[a], 0.0f) << name(mode) << " a=" << a;
      else
        ASSERT_EQ(r.weights[a], base.weights[a]) << name(mode) << " a=" << a;
    }
  }
}

TEST(NullRouting, RenormalizeMakesRealWeightsSumToOne) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 2000, K = 4;
  const Routing base = random_routing(T, K, 8, seed);
  for (NullRoutingMode mode : kModes) {
    Routing r = base;
    apply_null_routing(r, null_config(0.7, mode, true), seed);  // ~24% of tokens end all-null
    int64_t all_null = 0;
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0;
      int64_t reals = 0;
      for (int64_t k = 0; k < K; ++k) {
        const size_t a = size_t(t * K + k);
        sum += r.weights[a];
        reals += r.ids[a] < r.experts;
        if (r.ids[a] >= r.experts) {
          ASSERT_EQ(r.weights[a], 0.0f);
        }
      }
      if (reals == 0) {
        ++all_null;
        ASSERT_EQ(sum, 0.0) << "t=" << t;
      } else {
        ASSERT_NEAR(sum, 1.0, 1e-6) << name(mode) << " t=" << t;
      }
    }
    EXPECT_GT(all_null, 0) << name(mode);
  }
}

TEST(NullRouting, ZeroFractionChangesNothing) {
  const uint64_t seed = testing::test_seed();
  const Routing base = random_routing(300, 4, 8, seed);
  for (NullRoutingMode mode : kModes) {
    Routing r = base;
    const NullRoutingStats s = apply_null_routing(r, null_config(0.0, mode, true, 4), seed);
    EXPECT_EQ(r.ids, base.ids);
    EXPECT_EQ(r.weights, base.weights);
    EXPECT_EQ(s.target, 0.0);
    EXPECT_EQ(s.realized, 0.0);
    EXPECT_EQ(s.null_experts, 0);
    EXPECT_EQ(s.null_assignments, 0);
    EXPECT_EQ(s.real_assignments, 300 * 4);
  }
}

TEST(NullRouting, NoTokens) {
  Routing r = routing_from(0, 2, 4, {}, {});
  const NullRoutingStats s = apply_null_routing(r, null_config(0.5, NullRoutingMode::independent), 1);
  EXPECT_EQ(s.realized, 0.0);
  EXPECT_EQ(s.null_experts, 4);
  EXPECT_EQ(s.null_assignments, 0);
  EXPECT_EQ(s.real_assignments, 0);
}

// ----------------------------------------------------------------------- validation and flags

TEST(NullRoutingConfig, Validation) {
  EXPECT_TRUE(validate(null_config(0.0, NullRoutingMode::independent)));
  EXPECT_TRUE(validate(null_config(0.999, NullRoutingMode::take_until_null, true, 12)));
  const std::pair<double, const char*> bad[] = {
      {1.0, "Invalid null-route fraction 1.0; expected in [0, 1)."},
      {1.5, "Invalid null-route fraction 1.5; expected in [0, 1)."},
      {-0.1, "Invalid null-route fraction -0.1; expected in [0, 1)."},
      {std::nan(""), "Invalid null-route fraction nan; expected in [0, 1)."},
      {std::numeric_limits<double>::infinity(), "Invalid null-route fraction inf; expected in [0, 1)."},
  };
  for (const auto& [f, message] : bad) {
    const Status s = validate(null_config(f, NullRoutingMode::independent));
    EXPECT_FALSE(s);
    EXPECT_EQ(s.message(), message);
  }
  const Status s = validate(null_config(0.5, NullRoutingMode::independent, false, -1));
  EXPECT_FALSE(s);
  EXPECT_EQ(s.message(), "invalid --null-experts=-1: must be >= 0 (0 = derived)");
}

TEST(NullRoutingConfig, ModeNames) {
  for (NullRoutingMode mode : kModes) EXPECT_EQ(parse_null_routing_mode(name(mode)), mode);
  EXPECT_STREQ(name(NullRoutingMode::take_until_null), "take_until_null");
  EXPECT_EQ(parse_null_routing_mode("Independent"), std::nullopt);
  EXPECT_EQ(parse_null_routing_mode(""), std::nullopt);
}

TEST(NullRoutingConfig, FractionPrecedence) {
  Status s;
  const std::vector<double> sweep = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};
  EXPECT_EQ(null_route_fractions("0.1, 0.3", true, 0.5, s), (std::vector<double>{0.1, 0.3}));
  EXPECT_TRUE(s);
  EXPECT_EQ(null_route_fractions(" 0.25 ,, 1e-1 ,\t0,", false, 0.5, s),
            (std::vector<double>{0.25, 0.1, 0.0}));
  EXPECT_TRUE(s);
  EXPECT_EQ(null_route_fractions("", true, 0.5, s), sweep);
  EXPECT_TRUE(s);
  EXPECT_EQ(null_route_fractions(" , ", true, 0.5, s), sweep);  // a list of blanks names no value
  EXPECT_TRUE(s);
  EXPECT_EQ(null_route_fractions("", false, 0.5, s), (std::vector<double>{0.5}));
  EXPECT_TRUE(s);
  EXPECT_EQ(null_route_fractions("", false, 0.0, s), (std::vector<double>{0.0}));
  EXPECT_TRUE(s);
  // A value that is overridden is not validated.
  EXPECT_EQ(null_route_fractions("", true, 2.0, s), sweep);
  EXPECT_TRUE(s);
}

TEST(NullRoutingConfig, FractionErrors) {
  Status s;
  EXPECT_TRUE(null_route_fractions("0.2,abc", false, 0.0, s).empty());
  EXPECT_EQ(s.message(), "invalid --null-route-frac-list entry 'abc': not a number");
  EXPECT_TRUE(null_route_fractions("0.5x", false, 0.0, s).empty());
  EXPECT_EQ(s.message(), "invalid --null-route-frac-list entry '0.5x': not a number");
  EXPECT_TRUE(null_route_fractions("0.5,1", false, 0.0, s).empty());
  EXPECT_EQ(s.message(), "Invalid null-route fraction 1.0; expected in [0, 1).");
  EXPECT_TRUE(null_route_fractions("", false, -0.5, s).empty());
  EXPECT_EQ(s.message(), "Invalid null-route fraction -0.5; expected in [0, 1).");
}

// ------------------------------------------------------------------------- downstream stages

TEST(NullRouting, PackAndPlanExcludeNulls) {
  const uint64_t seed = testing::test_seed();
  MoeConfig cfg;
  cfg.tokens = 333;
  cfg.experts = 8;
  cfg.topk = 4;
  cfg.dtype = Dtype::f32;
  cfg.seed = seed;
  for (NullRoutingMode mode : kModes) {
    Routing r = make_routing(cfg);
    const NullRoutingStats s = apply_null_routing(r, null_config(0.4, mode, true), seed);
    for (PackStrategy strategy :
         {PackStrategy::argsort, PackStrategy::tuple_sort, PackStrategy::expert_score_sort}) {
      SCOPED_TRACE(std::string(name(mode)) + " " + name(strategy));
      cpu::Packed p;
      cpu::pack_assignments(p, host_view(r), strategy);
      int64_t grouped = 0;
      for (int32_t g : p.group_sizes) grouped += g;
      EXPECT_EQ(grouped, s.real_assignments);
      // Nulls sort to the tail.
      for (int64_t i = 0; i < cfg.assignments(); ++i)
        ASSERT_EQ(r.ids[size_t(p.sort_idx[size_t(i)])] >= cfg.experts, i >= s.real_assignments) << "i=" << i;
      for (int64_t tile : {1, 64}) {
        DispatchPlan built = allocate_plan(cfg, tile, host_memory());
        cpu::build_dispatch_plan(built, p, host_view(r), cfg, tile);
        const testing::PlanVectors plan = testing::plan_vectors(built);
        EXPECT_EQ(plan.live_rows, s.real_assignments);
        for (int64_t row = 0; row < plan.rows; ++row) {
          const int32_t a = plan.row_assignment[size_t(row)];
          if (a >= 0) {
            ASSERT_LT(r.ids[size_t(a)], cfg.experts) << "row=" << row;
          }
        }
        for (int64_t a = 0; a < cfg.assignments(); ++a)
          ASSERT_EQ(plan.assignment_row[size_t(a)] < 0, r.ids[size_t(a)] >= cfg.experts) << "a=" << a;
      }
    }
  }
}

// Null-routing a token's assignment must equal keeping that assignment with weight 0.
TEST(NullRouting, ReferenceIgnoresNullAssignments) {
  const uint64_t seed = testing::test_seed();
  MoeConfig cfg;
  cfg.tokens = 24;
  cfg.hidden = 8;
  cfg.mlp_dim = 6;
  cfg.experts = 4;
  cfg.topk = 2;
  cfg.shared_expert_dim = 4;
  cfg.dtype = Dtype::f32;
  cfg.seed = seed;
  const MoeInputs in = make_inputs(cfg);
  const Routing base = make_routing(cfg);
  const ReferenceResult plain = reference_forward(cfg, in, base, false);
  for (NullRoutingMode mode : kModes) {
    for (bool renormalize : {false, true}) {
      SCOPED_TRACE(std::string(name(mode)) + " renormalize=" + std::to_string(renormalize));
      Routing nulled = base;
      apply_null_routing(nulled, null_config(0.5, mode, renormalize), seed);
      Routing zeroed = nulled;  // the real experts back in place, weights kept (0 for the nulls)
      for (size_t a = 0; a < zeroed.ids.size(); ++a)
        if (zeroed.ids[a] >= cfg.experts) zeroed.ids[a] = base.ids[a];
      const ReferenceResult a = reference_forward(cfg, in, nulled, true);
      const ReferenceResult b = reference_forward(cfg, in, zeroed, true);
      EXPECT_EQ(a.out, b.out);
      EXPECT_EQ(a.loss, b.loss);
      EXPECT_EQ(a.dx, b.dx);
      EXPECT_EQ(a.dw1, b.dw1);
      EXPECT_EQ(a.dw3, b.dw3);
      EXPECT_EQ(a.dw2, b.dw2);
      EXPECT_NE(a.out, plain.out);  // the nulls did remove work
    }
  }
}

}  // namespace
}  // namespace moe
