// Pack (stable by-expert permutation, three strategies) and the dispatch plan (capacity x tile layouts).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "cpu/ops/pack.h"
#include "moe/backend.h"
#include "moe/pack.h"
#include "moe/routing.h"
#include "test_util.h"

namespace moe {
namespace {

using cpu::Packed;
using testing::PlanVectors;

constexpr PackStrategy kStrategies[] = {PackStrategy::argsort, PackStrategy::tuple_sort,
                                        PackStrategy::expert_score_sort};

enum class IdPattern {
  distinct,     // K distinct experts per token
  nulls,        // distinct, ~30% replaced by cyclic null slots E + a % 3
  huge_nulls,   // ~30% replaced by null ids spread up to INT32_MAX
  one_expert,   // every assignment on expert E-1
  two_experts,  // only experts 1 and E-2: the rest are empty
  all_null,
};

struct IdCase {
  const char* name;
  int64_t T, K, E;
  IdPattern pattern;
};

const IdCase kIdCases[] = {
    {"distinct", 257, 4, 8, IdPattern::distinct},
    {"nulls", 255, 4, 8, IdPattern::nulls},
    {"huge_nulls", 101, 2, 16, IdPattern::huge_nulls},
    {"one_expert", 64, 3, 4, IdPattern::one_expert},
    {"empty_experts", 33, 3, 10, IdPattern::two_experts},
    {"k1", 50, 1, 8, IdPattern::distinct},
    {"k_eq_e", 19, 6, 6, IdPattern::distinct},
    {"t1", 1, 2, 4, IdPattern::distinct},
    {"t1_e1", 1, 1, 1, IdPattern::distinct},
    {"all_null", 9, 2, 3, IdPattern::all_null},
    {"t0", 0, 2, 4, IdPattern::distinct},
};

Routing make_ids(const IdCase& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const int64_t A = c.T * c.K;
  std::vector<int32_t> ids(static_cast<size_t>(A));
  std::vector<float> weights(static_cast<size_t>(A));
  std::vector<int32_t> experts(static_cast<size_t>(c.E));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> huge(int32_t(c.E), std::numeric_limits<int32_t>::max());
  for (int64_t t = 0; t < c.T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), gen);
    for (int64_t k = 0; k < c.K; ++k) {
      const int64_t a = t * c.K + k;
      int32_t id = experts[size_t(k)];
      const bool null_slot = unit(gen) < 0.3f;
      switch (c.pattern) {
        case IdPattern::distinct:
          break;
        case IdPattern::nulls:
          id = null_slot ? int32_t(c.E + a % 3) : id;
          break;
        case IdPattern::huge_nulls:
          id = null_slot ? (a % 4 == 0 ? std::numeric_limits<int32_t>::max() : huge(gen)) : id;
          break;
        case IdPattern::one_expert:
          id = int32_t(c.E - 1);
          break;
        case IdPattern::two_experts:
          id = unit(gen) < 0.5f ? 1 : int32_t(c.E - 2);
          break;
        case IdPattern::all_null:
          id = int32_t(c.E + a % 2);
          break;
      }
      ids[size_t(a)] = id;
      weights[size_t(a)] = unit(gen);
    }
  }
  return routing_from(c.T, c.K, c.E, std::move(ids), std::move(weights));
}

// The stable by-expert order, built independently: per id value, assignments in flat order.
std::vector<int32_t> reference_order(const Routing& r) {
  std::map<int32_t, std::vector<int32_t>> buckets;
  for (size_t a = 0; a < r.ids.size(); ++a) buckets[r.ids[a]].push_back(int32_t(a));
  std::vector<int32_t> order;
  for (const auto& [id, members] : buckets) order.insert(order.end(), members.begin(), members.end());
  return order;
}

void expect_packed(const Packed& p, const Routing& r) {
  ASSERT_EQ(p.sort_idx, reference_order(r));
  const std::vector<int64_t> counts = expert_counts(r);
  ASSERT_EQ(p.group_sizes, std::vector<int32_t>(counts.begin(), counts.end()));
}

// -------------------------------------------------------------------------------------------- pack

TEST(Pack, EveryStrategyGivesTheStableByExpertOrder) {
  const uint64_t seed = testing::test_seed();
  for (const IdCase& c : kIdCases) {
    const Routing r = make_ids(c, seed);
    for (PackStrategy s : kStrategies) {
      SCOPED_TRACE(std::string(c.name) + " " + name(s));
      Packed p;
      cpu::pack_assignments(p, host_view(r), s);
      expect_packed(p, r);
    }
  }
}

TEST(Pack, StructuredOrders) {
  // All on one expert: identity. Descending ids: groups reversed, flat order inside each group.
  const Routing same = routing_from(5, 1, 3, {2, 2, 2, 2, 2}, std::vector<float>(5, 1.0f));
  const Routing desc = routing_from(3, 2, 3, {2, 2, 1, 1, 0, 0}, std::vector<float>(6, 0.5f));
  for (PackStrategy s : kStrategies) {
    Packed p;
    cpu::pack_assignments(p, host_view(same), s);
    EXPECT_EQ(p.sort_idx, (std::vector<int32_t>{0, 1, 2, 3, 4})) << name(s);
    EXPECT_EQ(p.group_sizes, (std::vector<int32_t>{0, 0, 5})) << name(s);
    cpu::pack_assignments(p, host_view(desc), s);
    EXPECT_EQ(p.sort_idx, (std::vector<int32_t>{4, 5, 2, 3, 0, 1})) << name(s);
  }
}

// One Packed reused across sizes and strategies, as the timed loop does.
TEST(Pack, ReusedPackedStaysCorrect) {
  const uint64_t seed = testing::test_seed();
  Packed p;
  for (int round = 0; round < 2; ++round)
    for (const IdCase& c : kIdCases)
      for (PackStrategy s : kStrategies) {
        SCOPED_TRACE(std::string(c.name) + " " + name(s));
        const Routing r = make_ids(c, seed + uint64_t(round));
        cpu::pack_assignments(p, host_view(r), s);
        expect_packed(p, r);
      }
}

// ---------------------------------------------------------------------------------------- dispatch

int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

// Checks the plan against the definition: group e's rank-j assignment (flat order among ids == e) sits at
// row group_offset[e] + j iff j < cap; every other row of the group is padding.
void expect_plan(const PlanVectors& p, const Routing& r, const MoeConfig& cfg, int64_t tile) {
  const int64_t E = r.experts, A = r.tokens * r.topk;
  const int64_t cap =
      cfg.capacity_active()
          ? std::max<int64_t>(1, int64_t(std::ceil(cfg.capacity_factor * double(A) / double(E))))
          : 0;
  const bool pad = cap > 0 && cfg.capacity_policy == CapacityPolicy::pad;
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(E));
  for (int64_t a = 0; a < A; ++a)
    if (r.ids[size_t(a)] < E) members[size_t(r.ids[size_t(a)])].push_back(int32_t(a));

  ASSERT_EQ(int64_t(p.group_offset.size()), E + 1);
  ASSERT_EQ(p.group_offset[0], 0);
  ASSERT_EQ(p.rows, p.group_offset[size_t(E)]);
  ASSERT_EQ(int64_t(p.row_assignment.size()), p.rows);
  ASSERT_EQ(int64_t(p.row_weight.size()), p.rows);
  ASSERT_EQ(int64_t(p.assignment_row.size()), A);
  int64_t live = 0, dropped = 0;
  for (int64_t e = 0; e < E; ++e) {
    const auto& m = members[size_t(e)];
    const int64_t count = int64_t(m.size());
    const int64_t kept = cap > 0 ? std::min(count, cap) : count;
    ASSERT_EQ(p.group_offset[size_t(e)] % tile, 0) << "e=" << e;
    ASSERT_EQ(p.group_rows(e), round_up(pad ? cap : count, tile)) << "e=" << e;
    for (int64_t j = 0; j < p.group_rows(e); ++j) {
      const int64_t row = p.group_offset[size_t(e)] + j;
      const int32_t a = p.row_assignment[size_t(row)];
      if (j < kept) {
        ASSERT_EQ(a, m[size_t(j)]) << "e=" << e << " j=" << j;
        ASSERT_EQ(r.ids[size_t(a)], e);
        ASSERT_EQ(p.assignment_row[size_t(a)], row);
        ASSERT_EQ(p.row_token(row), a / r.topk);
        const float w = r.weights[size_t(a)];
        ASSERT_EQ(p.row_weight[size_t(row)], cfg.dtype == Dtype::bf16 ? round_to_bf16(w) : w);
      } else {
        ASSERT_EQ(a, -1) << "e=" << e << " j=" << j;
        ASSERT_EQ(p.row_weight[size_t(row)], 0.0f);
        ASSERT_EQ(p.row_token(row), -1);
      }
    }
    for (int64_t j = kept; j < count; ++j) ASSERT_EQ(p.assignment_row[size_t(m[size_t(j)])], -1);
    ASSERT_EQ(p.group_live[size_t(e)], kept) << "e=" << e;
    live += kept;
    dropped += cap > 0 ? std::max<int64_t>(count - cap, 0) : 0;
  }
  for (int64_t a = 0; a < A; ++a)
    if (r.ids[size_t(a)] >= E) {
      ASSERT_EQ(p.assignment_row[size_t(a)], -1) << "null a=" << a;
    }
  EXPECT_EQ(p.live_rows, live);
  EXPECT_EQ(p.live_rows, std::count_if(p.row_assignment.begin(), p.row_assignment.end(),
                                       [](int32_t a) { return a >= 0; }));
  EXPECT_EQ(p.dropped, dropped);
  EXPECT_EQ(p.tokens, r.tokens);
  EXPECT_EQ(p.topk, r.topk);
  EXPECT_EQ(p.experts, E);
}

// The plan of `cfg` for routing `r` from the CPU's kernels (after `packed`) and from the ref backend's
// pack op, which writes it from the definition.
std::pair<PlanVectors, PlanVectors> cpu_and_ref_plans(const Packed& packed, const Routing& r,
                                                      const MoeConfig& cfg, int64_t tile) {
  DispatchPlan cpu_plan = allocate_plan(cfg, tile, host_memory());
  cpu::build_dispatch_plan(cpu_plan, packed, host_view(r), cfg, tile);
  Backend& ref = testing::test_backend("ref");
  const StageTracer tracer;
  DispatchPlan ref_plan = allocate_plan(cfg, tile, ref.memory());
  ref.make_pack(OpContext{cfg, ref, tracer, tile})->forward(ref_plan, to_memory(r, ref.memory()));
  return {testing::plan_vectors(cpu_plan), testing::plan_vectors(ref_plan)};
}

TEST(DispatchPlan, InvariantsForEveryPolicyFactorAndTile) {
  const uint64_t seed = testing::test_seed();
  Packed packed;
  for (const IdCase& c : kIdCases) {
    const Routing r = make_ids(c, seed);
    cpu::pack_assignments(packed, host_view(r), PackStrategy::argsort);
    for (CapacityPolicy policy : {CapacityPolicy::none, CapacityPolicy::drop, CapacityPolicy::pad})
      for (double cf : {0.5, 1.25})
        for (int64_t tile : {1, 8, 64})
          for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
            MoeConfig cfg;
            cfg.tokens = c.T;
            cfg.topk = c.K;
            cfg.experts = c.E;
            cfg.capacity_policy = policy;
            cfg.capacity_factor = cf;
            cfg.dtype = dt;
            SCOPED_TRACE(std::string(c.name) + " " + name(policy) + " cf=" + std::to_string(cf) +
                         " tile=" + std::to_string(tile) + " " + dtype_name(dt));
            const auto [cpu_plan, ref_plan] = cpu_and_ref_plans(packed, r, cfg, tile);
            expect_plan(cpu_plan, r, cfg, tile);
            if (::testing::Test::HasFatalFailure()) return;
            expect_plan(ref_plan, r, cfg, tile);
            if (::testing::Test::HasFatalFailure()) return;
            ASSERT_LE(cpu_plan.rows, max_plan_rows(cfg, tile));
          }
  }
}

// E = 3, T = 4, K = 2, cf = 0.75 -> cap = ceil(0.75 * 8 / 3) = 2. Expert 0 has 4 assignments (a = 0 2 4 6),
// expert 1 has 1 (a = 1), expert 2 has 3 (a = 3 5 7).
TEST(DispatchPlan, HandWorkedCapacityLayouts) {
  const Routing r = routing_from(4, 2, 3, {0, 1, 0, 2, 0, 2, 0, 2}, {.6f, .4f, .7f, .3f, .8f, .2f, .9f, .1f});
  Packed packed;
  cpu::pack_assignments(packed, host_view(r), PackStrategy::tuple_sort);
  MoeConfig cfg;
  cfg.tokens = 4;
  cfg.topk = 2;
  cfg.experts = 3;
  cfg.capacity_factor = 0.75;
  cfg.dtype = Dtype::f32;
  cfg.capacity_policy = CapacityPolicy::drop;
  PlanVectors p = cpu_and_ref_plans(packed, r, cfg, 1).first;
  EXPECT_EQ(p.group_offset, (std::vector<int64_t>{0, 4, 5, 8}));
  EXPECT_EQ(p.row_assignment, (std::vector<int32_t>{0, 2, -1, -1, 1, 3, 5, -1}));
  EXPECT_EQ(p.row_weight, (std::vector<float>{.6f, .7f, 0, 0, .4f, .3f, .2f, 0}));
  EXPECT_EQ(p.assignment_row, (std::vector<int32_t>{0, 4, 1, 5, -1, 6, -1, -1}));
  EXPECT_EQ(p.dropped, 3);
  EXPECT_EQ(p.live_rows, 5);

  cfg.capacity_policy = CapacityPolicy::pad;
  p = cpu_and_ref_plans(packed, r, cfg, 4).first;
  EXPECT_EQ(p.group_offset, (std::vector<int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(p.row_assignment, (std::vector<int32_t>{0, 2, -1, -1, 1, -1, -1, -1, 3, 5, -1, -1}));
  EXPECT_EQ(p.dropped, 3);
  EXPECT_EQ(p.live_rows, 5);

  cfg.capacity_policy = CapacityPolicy::none;
  p = cpu_and_ref_plans(packed, r, cfg, 1).first;
  EXPECT_EQ(p.row_assignment, (std::vector<int32_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(p.dropped, 0);
  EXPECT_EQ(p.live_rows, 8);
}

TEST(DispatchPlan, LayoutTileRows) {
  EXPECT_EQ(layout_tile_rows(GemmBackend::gmm, 64), 64);
  EXPECT_EQ(layout_tile_rows(GemmBackend::ragged_dot, 64), 1);
}

// The buffers are sized before routing is known: no routing may need more rows than max_plan_rows.
// Worst cases: every expert non-empty with one row (maximal tile padding), and capacity pad.
TEST(DispatchPlan, MaxRowsBoundsEveryRouting) {
  MoeConfig cfg;
  cfg.tokens = 7;
  cfg.topk = 3;
  cfg.experts = 21;
  cfg.dtype = Dtype::f32;
  std::vector<int32_t> ids(21);
  std::iota(ids.begin(), ids.end(), 0);  // 21 experts with one assignment each
  const Routing r = routing_from(7, 3, 21, ids, std::vector<float>(21, 1.0f));
  Packed packed;
  cpu::pack_assignments(packed, host_view(r), PackStrategy::argsort);
  for (int64_t tile : {1, 8, 64}) {
    EXPECT_EQ(cpu_and_ref_plans(packed, r, cfg, tile).first.rows, max_plan_rows(cfg, tile)) << tile;
    MoeConfig pad = cfg;
    pad.capacity_policy = CapacityPolicy::pad;
    pad.capacity_factor = 2.0;
    EXPECT_EQ(cpu_and_ref_plans(packed, r, pad, tile).first.rows, max_plan_rows(pad, tile)) << tile;
  }
}

}  // namespace
}  // namespace moe
