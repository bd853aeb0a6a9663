// Synthetic routing (top-k, distributions, diagnostics) and the block's inputs (streams, concat/split).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "moe/inputs.h"
#include "moe/rng.h"
#include "moe/routing.h"
#include "test_util.h"

namespace moe {
namespace {

MoeConfig small_config(uint64_t seed, Dtype dtype, int64_t shared_dim) {
  MoeConfig cfg;
  cfg.tokens = 33;
  cfg.hidden = 16;
  cfg.mlp_dim = 24;
  cfg.experts = 3;
  cfg.topk = 2;
  cfg.shared_expert_dim = shared_dim;
  cfg.dtype = dtype;
  cfg.seed = seed;
  return cfg;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// ---------------------------------------------------------------------------------------------- top-k

TEST(RoutingTopk, DescendingWithTiesToLowerIndex) {
  const std::vector<float> logits = {1,  3, 3,  2, 3,  // three-way tie at the top
                                     0,  0, 0,  0, 0,  // all tied
                                     -1, 5, -2, 5, 4};
  const Routing r = route_topk(logits, 3, 5, 3);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 0, 1, 2, 1, 3, 4}));
  for (int k = 0; k < 6; ++k) EXPECT_FLOAT_EQ(r.weights[size_t(k)], 1.0f / 3.0f);
  const double z = 2.0 + std::exp(-1.0);
  EXPECT_NEAR(r.weights[6], 1.0 / z, 1e-7);
  EXPECT_NEAR(r.weights[7], 1.0 / z, 1e-7);
  EXPECT_NEAR(r.weights[8], std::exp(-1.0) / z, 1e-7);
}

// Logits quantised to halves so ties are frequent; the reference is a full stable sort. K up to 32
// takes the insertion path, larger K the selection path.
TEST(RoutingTopk, MatchesFullStableSortOnTiedRandomLogits) {
  const uint64_t seed = testing::test_seed();
  struct Case {
    int64_t T, E, K;
  };
  for (Case c : {Case{37, 11, 1}, {37, 11, 3}, {37, 11, 11}, {9, 48, 32}, {9, 48, 33}, {9, 48, 48}}) {
    const int64_t T = c.T, E = c.E, K = c.K;
    std::vector<float> logits(static_cast<size_t>(T * E));
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = float(std::round(2.0 * random_normal(seed, i)) / 2.0);
    const Routing r = route_topk(logits, T, E, K);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = logits.data() + t * E;
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      double z = 0, sum = 0;
      for (int64_t k = 0; k < K; ++k) z += std::exp(double(row[order[size_t(k)]]) - row[order[0]]);
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = size_t(t * K + k);
        ASSERT_EQ(r.ids[i], order[size_t(k)]) << "t=" << t << " k=" << k << " K=" << K;
        EXPECT_NEAR(r.weights[i], std::exp(double(row[order[size_t(k)]]) - row[order[0]]) / z, 1e-6);
        if (k > 0) {
          EXPECT_LE(r.weights[i], r.weights[i - 1]);
        }
        sum += r.weights[i];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

// -------------------------------------------------------------------------------------- distributions

// impl ref_dp's routing (spec §5.5): softmax over all E, then top-k of the probabilities, optionally
// renormalized: route_topk's ids, weights exp(l) / sum_E exp(l) (computed here in double), and
// route_topk's weights once renormalized.
TEST(RoutingTopk, SoftmaxOverEveryExpertThenTopk) {
  const int64_t T = 64, E = 7, K = 3;
  std::vector<float> logits(size_t(T * E));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(random_normal(testing::test_seed(), i));
  const Routing topk = route_topk(logits, T, E, K);
  const Routing raw = route_softmax_topk(logits, T, E, K, false);
  const Routing renorm = route_softmax_topk(logits, T, E, K, true);
  EXPECT_EQ(raw.ids, topk.ids);
  EXPECT_EQ(renorm.ids, topk.ids);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0, kept = 0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(double(logits[size_t(t * E + e)]));
    for (int64_t k = 0; k < K; ++k) {
      const size_t a = size_t(t * K + k);
      const double p = std::exp(double(logits[size_t(t * E + raw.ids[a])])) / sum;
      EXPECT_NEAR(raw.weights[a], p, 1e-6 * p) << t << "," << k;
      EXPECT_NEAR(renorm.weights[a], topk.weights[a], 1e-6) << t << "," << k;
      kept += raw.weights[a];
    }
    EXPECT_LT(kept, 1.0) << "the other experts' probability is not given back without renormalizing";
  }
  MoeConfig c;
  c.tokens = T;
  c.experts = E;
  c.topk = K;
  c.impl = Impl::ref_dp;
  EXPECT_EQ(make_routing(c).weights,
            route_softmax_topk(sample_router_logits(c, c.distribution, distribution_key(c)), T, E, K, false)
                .weights);
}

TEST(RoutingDistribution, RandomLogitsAreTheCounterStream) {
  const uint64_t seed = testing::test_seed();
  MoeConfig cfg = small_config(seed, Dtype::f32, 0);
  const std::vector<float> logits = sample_router_logits(cfg, Distribution::random, seed);
  ASSERT_EQ(int64_t(logits.size()), cfg.tokens * cfg.experts);
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], float(random_normal(seed, i)));
}

TEST(RoutingDistribution, MakeRoutingUsesTheDistributionKey) {
  const uint64_t seed = testing::test_seed();
  for (Distribution d : {Distribution::random, Distribution::runs}) {
    MoeConfig cfg = small_config(seed, Dtype::f32, 0);
    cfg.distribution = d;
    const uint64_t key = derive_key(derive_key(seed, kStreamRoute), uint64_t(d));
    const Routing expected = route_topk(sample_router_logits(cfg, d, key), cfg.tokens, cfg.experts, cfg.topk);
    const Routing r = make_routing(cfg);
    EXPECT_EQ(r.ids, expected.ids) << name(d);
    EXPECT_EQ(r.weights, expected.weights) << name(d);
    EXPECT_EQ(r.tokens, cfg.tokens);
    EXPECT_EQ(r.topk, cfg.topk);
    EXPECT_EQ(r.experts, cfg.experts);
  }
}

TEST(RoutingDistribution, SameRoutingForAnyThreadCount) {
  const uint64_t seed = testing::test_seed();
  const int saved = omp_get_max_threads();
  for (Distribution d : {Distribution::random, Distribution::runs}) {
    MoeConfig cfg;
    cfg.tokens = 4099;  // T * E above the parallel threshold
    cfg.experts = 16;
    cfg.topk = 4;
    cfg.seed = seed;
    cfg.distribution = d;
    omp_set_num_threads(1);
    const Routing a = make_routing(cfg);
    omp_set_num_threads(2);
    const Routing b = make_routing(cfg);
    EXPECT_EQ(a.ids, b.ids) << name(d);
    EXPECT_EQ(a.weights, b.weights) << name(d);
  }
  omp_set_num_threads(saved);
}

// Every expert change starts a run, and a run goes to a least-loaded expert, so at each change the new
// top-1 expert has the minimal top-1 load so far; that bounds the final spread by the longest run.
// Runs are geometric with mean 1/p (merges of consecutive runs on one expert lengthen them a little).
TEST(RoutingDistribution, RunsHaveTargetLengthAndLeastLoadedExperts) {
  const uint64_t seed = testing::test_seed();
  struct Case {
    double alpha, mean_run;
  };
  for (Case c : {Case{0.98, 50.0}, Case{0.5, 2.0}}) {
    SCOPED_TRACE("alpha=" + std::to_string(c.alpha));
    MoeConfig cfg;
    cfg.tokens = 20000;
    cfg.experts = 8;
    cfg.topk = 2;
    cfg.run_alpha = c.alpha;
    cfg.seed = seed;
    cfg.distribution = Distribution::runs;
    const Routing r = make_routing(cfg);
    const RunStats rs = run_stats(r);
    EXPECT_GT(rs.mean, 0.75 * c.mean_run);
    EXPECT_LT(rs.mean, 1.4 * c.mean_run);
    std::vector<int64_t> load(static_cast<size_t>(cfg.experts), 0);
    for (int64_t t = 0; t < cfg.tokens; ++t) {
      const int32_t e = r.ids[size_t(t * cfg.topk)];
      if (t == 0 || e != r.ids[size_t((t - 1) * cfg.topk)]) {
        ASSERT_EQ(load[size_t(e)], *std::min_element(load.begin(), load.end())) << "t=" << t;
      }
      ++load[size_t(e)];
      ASSERT_GT(r.weights[size_t(t * cfg.topk)], 0.9f);  // the +6 margin makes the run expert top-1
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(double(*hi - *lo), rs.max);
  }
}

// With two experts and short runs, loads tie often; the tie rule then moves away from the previous
// expert, which keeps runs from merging: measured mean ~2.67 with the rule, ~3.2 without it.
TEST(RoutingDistribution, RunsLeavePreviousExpertOnTies) {
  const uint64_t seed = testing::test_seed();
  MoeConfig cfg;
  cfg.tokens = 20000;
  cfg.experts = 2;
  cfg.topk = 1;
  cfg.run_alpha = 0.0;
  cfg.seed = seed;
  cfg.distribution = Distribution::runs;
  EXPECT_LT(run_stats(make_routing(cfg)).mean, 2.95);
}

TEST(RoutingDistribution, RunsEdgeShapes) {
  const uint64_t seed = testing::test_seed();
  for (auto [T, E] : {std::pair<int64_t, int64_t>{1, 4}, {7, 1}, {5, 3}}) {
    MoeConfig cfg;
    cfg.tokens = T;
    cfg.experts = E;
    cfg.topk = 1;
    cfg.seed = seed;
    cfg.distribution = Distribution::runs;
    const Routing r = make_routing(cfg);
    ASSERT_EQ(int64_t(r.ids.size()), T);
    for (int32_t id : r.ids) EXPECT_LT(id, E);
  }
}

// -------------------------------------------------------------------------------------------- stats

TEST(RoutingStats, RunStatsHandComputed) {
  // Top-1 sequence 0 0 1 1 1 9 0 (9 is a null slot with E = 4; it still forms a run).
  const Routing r =
      routing_from(7, 2, 4, {0, 1, 0, 2, 1, 0, 1, 3, 1, 2, 9, 1, 0, 3}, std::vector<float>(14, 0.5f));
  const RunStats s = run_stats(r);
  EXPECT_EQ(s.runs, 4);  // lengths 2 3 1 1
  EXPECT_EQ(s.mean, 7.0 / 4.0);
  EXPECT_NEAR(s.p95, 2.85, 1e-12);  // sorted 1 1 2 3, position 0.95 * 3 = 2.85
  EXPECT_EQ(s.max, 3);
}

TEST(RoutingStats, LoadStatsHandComputed) {
  // E = 4, ids 0 0 1 1 1 9 0 0 2 -> counts (4, 3, 1, 0); the null id 9 is dropped.
  const Routing r = routing_from(9, 1, 4, {0, 0, 1, 1, 1, 9, 0, 0, 2}, std::vector<float>(9, 1.0f));
  EXPECT_EQ(expert_counts(r), (std::vector<int64_t>{4, 3, 1, 0}));
  const LoadStats s = load_stats(r);
  const double mean = 2.0, sd = std::sqrt((4.0 + 1.0 + 1.0 + 4.0) / 4.0);
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.max, 4);
  EXPECT_NEAR(s.std, sd, 1e-12);
  EXPECT_NEAR(s.cv, sd / mean, 1e-12);
}

TEST(RoutingStats, AllNullLoadHasZeroCv) {
  const Routing r = routing_from(3, 1, 2, {2, 5, 7}, std::vector<float>(3, 0.0f));
  const LoadStats s = load_stats(r);
  EXPECT_EQ(s.max, 0);
  EXPECT_EQ(s.cv, 0);
  EXPECT_EQ(run_stats(r).runs, 3);
}

// -------------------------------------------------------------------------------------------- inputs

// Big enough (w1: 40960 elements) that the fills really run in parallel.
TEST(Inputs, IdenticalForAnyThreadCount) {
  const uint64_t seed = testing::test_seed();
  const int saved = omp_get_max_threads();
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    MoeConfig cfg = small_config(seed, dt, 48);
    cfg.hidden = 64;
    cfg.mlp_dim = 160;
    cfg.experts = 4;
    omp_set_num_threads(1);
    const MoeInputs a = make_inputs(cfg);
    omp_set_num_threads(2);
    const MoeInputs b = make_inputs(cfg);
    for (auto m : {&MoeInputs::x, &MoeInputs::w1, &MoeInputs::w3, &MoeInputs::w2, &MoeInputs::w13,
                   &MoeInputs::sw1, &MoeInputs::sw3, &MoeInputs::sw2, &MoeInputs::sw13})
      EXPECT_TRUE(same_bytes(a.*m, b.*m)) << dtype_name(dt) << " " << (a.*m).shape_string();
  }
  omp_set_num_threads(saved);
}

TEST(Inputs, ValuesAreTheSeedStreamsStoredInDtype) {
  const uint64_t seed = testing::test_seed();
  const MoeInputs f = make_inputs(small_config(seed, Dtype::f32, 5));
  const MoeInputs h = make_inputs(small_config(seed, Dtype::bf16, 5));
  struct Stream {
    Tensor MoeInputs::*member;
    RngStream id;
  };
  for (Stream s : {Stream{&MoeInputs::x, kStreamX},
                   {&MoeInputs::w1, kStreamW1},
                   {&MoeInputs::w2, kStreamW2},
                   {&MoeInputs::w3, kStreamW3},
                   {&MoeInputs::sw1, kStreamSharedW1},
                   {&MoeInputs::sw2, kStreamSharedW2},
                   {&MoeInputs::sw3, kStreamSharedW3}}) {
    const Tensor& tf = f.*s.member;
    const Tensor& th = h.*s.member;
    ASSERT_EQ(tf.dtype(), Dtype::f32);
    ASSERT_EQ(th.dtype(), Dtype::bf16);
    const uint64_t key = derive_key(seed, s.id);
    for (int64_t i = 0; i < tf.numel(); ++i) {
      const float v = float(random_normal(key, uint64_t(i)));
      ASSERT_EQ(tf.data<float>()[i], v) << "stream " << s.id << " i=" << i;
      ASSERT_EQ(th.data<bf16_t>()[i], f32_to_bf16(v)) << "stream " << s.id << " i=" << i;
    }
  }
}

TEST(Inputs, ShapesAndFusedWeights) {
  const MoeConfig cfg = small_config(testing::test_seed(), Dtype::bf16, 5);
  const MoeInputs in = make_inputs(cfg);
  const int64_t T = cfg.tokens, H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts, S = 5;
  EXPECT_EQ(in.x.shape(), (std::vector<int64_t>{T, H}));
  EXPECT_EQ(in.w2.shape(), (std::vector<int64_t>{E, M, H}));
  EXPECT_EQ(in.w13.shape(), (std::vector<int64_t>{E, H, 2 * M}));
  EXPECT_EQ(in.sw2.shape(), (std::vector<int64_t>{S, H}));
  EXPECT_EQ(in.sw13.shape(), (std::vector<int64_t>{H, 2 * S}));
  for (int64_t r = 0; r < E * H; ++r)
    for (int64_t j = 0; j < M; ++j) {
      ASSERT_EQ(in.w13.get(r * 2 * M + j), in.w1.get(r * M + j));
      ASSERT_EQ(in.w13.get(r * 2 * M + M + j), in.w3.get(r * M + j));
    }
}

TEST(Inputs, NoSharedExpertGivesEmptyTensors) {
  const MoeConfig cfg = small_config(testing::test_seed(), Dtype::f32, 0);
  const MoeInputs in = make_inputs(cfg);
  const int64_t H = cfg.hidden;
  EXPECT_EQ(in.sw1.shape(), (std::vector<int64_t>{H, 0}));
  EXPECT_EQ(in.sw3.shape(), (std::vector<int64_t>{H, 0}));
  EXPECT_EQ(in.sw2.shape(), (std::vector<int64_t>{0, H}));
  EXPECT_EQ(in.sw13.shape(), (std::vector<int64_t>{H, 0}));
  EXPECT_TRUE(in.sw13.empty());
}

TEST(Inputs, ConcatSplitRoundTrip) {
  const uint64_t seed = testing::test_seed();
  const std::vector<std::vector<int64_t>> shapes = {{3, 4, 5}, {6, 7}, {1, 2, 1}, {2, 3, 0}};
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (const auto& shape : shapes) {
      Tensor w1(dt, shape), w3(dt, shape);
      for (int64_t i = 0; i < w1.numel(); ++i) {
        w1.set(i, float(random_normal(seed, uint64_t(2 * i))));
        w3.set(i, float(random_normal(seed, uint64_t(2 * i + 1))));
      }
      Tensor w13, d1, d3;
      concat_last_dim(w13, w1, w3);
      const int64_t N = shape.back();
      std::vector<int64_t> fused = shape;
      fused.back() = 2 * N;
      ASSERT_EQ(w13.shape(), fused);
      ASSERT_EQ(w13.dtype(), dt);
      for (int64_t i = 0; i < w1.numel(); ++i) {
        ASSERT_EQ(w13.get(i / N * 2 * N + i % N), w1.get(i));
        ASSERT_EQ(w13.get(i / N * 2 * N + N + i % N), w3.get(i));
      }
      split_last_dim(d1, d3, w13);
      EXPECT_TRUE(same_bytes(d1, w1)) << dtype_name(dt) << " " << w1.shape_string();
      EXPECT_TRUE(same_bytes(d3, w3)) << dtype_name(dt) << " " << w1.shape_string();
    }
}

// A preallocated output of the right shape keeps its dtype: f32 gradients split into bf16 halves.
TEST(Inputs, SplitIntoPreallocatedOtherDtypeRounds) {
  const uint64_t seed = testing::test_seed();
  Tensor d13(Dtype::f32, {2, 3, 8});
  for (int64_t i = 0; i < d13.numel(); ++i) d13.set(i, float(random_normal(seed, uint64_t(i))));
  Tensor d1(Dtype::bf16, {2, 3, 4}), d3(Dtype::bf16, {2, 3, 4});
  const void* storage = d1.raw();
  split_last_dim(d1, d3, d13);
  EXPECT_EQ(d1.raw(), storage);
  ASSERT_EQ(d1.dtype(), Dtype::bf16);
  for (int64_t i = 0; i < d1.numel(); ++i) {
    EXPECT_EQ(d1.data<bf16_t>()[i], f32_to_bf16(d13.get(i / 4 * 8 + i % 4)));
    EXPECT_EQ(d3.data<bf16_t>()[i], f32_to_bf16(d13.get(i / 4 * 8 + 4 + i % 4)));
  }
}

TEST(Inputs, GradsMatchParameterShapes) {
  const MoeConfig cfg = small_config(0, Dtype::bf16, 5);
  const MoeInputs in = make_inputs(cfg);
  const MoeGrads g = make_grads(cfg);
  for (auto [gt, it] : {std::pair{&g.dx, &in.x},
                        {&g.dw1, &in.w1},
                        {&g.dw3, &in.w3},
                        {&g.dw2, &in.w2},
                        {&g.dsw1, &in.sw1},
                        {&g.dsw3, &in.sw3},
                        {&g.dsw2, &in.sw2}}) {
    EXPECT_EQ(gt->shape(), it->shape());
    EXPECT_EQ(gt->dtype(), Dtype::bf16);
  }
}

}  // namespace
}  // namespace moe
