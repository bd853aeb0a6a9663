// The float64 reference is the spec every fast path is checked against, so it is checked on its own
// terms: hand-computed values, finite differences of its loss for every gradient, capacity semantics
// against an explicit mask, and exact reading of bf16 inputs. Inputs and routing are built here by
// hand so these tests depend on nothing but the reference itself.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "moe/reference.h"
#include "moe/rng.h"
#include "test_util.h"

namespace moe {
namespace {

struct Shape {
  int64_t T, H, M, E, K, S;
};

MoeConfig config_for(const Shape& s, CapacityPolicy policy = CapacityPolicy::none,
                     double capacity_factor = 0) {
  MoeConfig cfg;
  cfg.tokens = s.T;
  cfg.hidden = s.H;
  cfg.mlp_dim = s.M;
  cfg.experts = s.E;
  cfg.topk = s.K;
  cfg.shared_expert_dim = s.S;
  cfg.dtype = Dtype::f32;
  cfg.capacity_policy = policy;
  cfg.capacity_factor = capacity_factor;
  return cfg;
}

// scale * N(0, 1): small values keep silu in its curved region and finite differences well conditioned.
Tensor random_tensor(Dtype dtype, std::vector<int64_t> shape, uint64_t key, double scale = 0.5) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, float(scale * random_normal(key, uint64_t(i))));
  return t;
}

// w13/sw13 stay empty: the reference reads w1/w3 directly.
MoeInputs random_inputs(const MoeConfig& cfg, uint64_t seed, Dtype dtype = Dtype::f32) {
  const int64_t T = cfg.tokens, H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts, S = cfg.shared_expert_dim;
  MoeInputs in;
  in.x = random_tensor(dtype, {T, H}, derive_key(seed, kStreamX));
  in.w1 = random_tensor(dtype, {E, H, M}, derive_key(seed, kStreamW1));
  in.w3 = random_tensor(dtype, {E, H, M}, derive_key(seed, kStreamW3));
  in.w2 = random_tensor(dtype, {E, M, H}, derive_key(seed, kStreamW2));
  in.sw1 = random_tensor(dtype, {H, S}, derive_key(seed, kStreamSharedW1));
  in.sw3 = random_tensor(dtype, {H, S}, derive_key(seed, kStreamSharedW3));
  in.sw2 = random_tensor(dtype, {S, H}, derive_key(seed, kStreamSharedW2));
  return in;
}

// Routing ids get a stream of their own; the weights use the router's stream.
constexpr uint64_t kStreamTestIds = 100;

// K distinct experts per token, uniformly at random.
std::vector<int32_t> random_ids(const Shape& s, uint64_t seed) {
  const uint64_t key = derive_key(seed, kStreamTestIds);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < s.T; ++t) {
    std::vector<int32_t> perm(size_t(s.E));
    for (int64_t e = 0; e < s.E; ++e) perm[size_t(e)] = int32_t(e);
    for (int64_t i = s.E - 1; i > 0; --i)
      std::swap(perm[size_t(i)], perm[random_bits(key, uint64_t(t * s.E + i)) % uint64_t(i + 1)]);
    ids.insert(ids.end(), perm.begin(), perm.begin() + s.K);
  }
  return ids;
}

// Weights are a softmax over K random logits per token, as the router would produce.
Routing routing_with(const Shape& s, std::vector<int32_t> ids, uint64_t seed) {
  const uint64_t key = derive_key(seed, kStreamRoute);
  Routing r{s.T, s.K, s.E, std::move(ids), std::vector<float>(size_t(s.T * s.K))};
  EXPECT_EQ(r.ids.size(), size_t(s.T * s.K));
  std::vector<double> z(size_t(s.K));
  for (int64_t t = 0; t < s.T; ++t) {
    double sum = 0;
    for (int64_t k = 0; k < s.K; ++k)
      sum += z[size_t(k)] = std::exp(random_normal(key, uint64_t(t * s.K + k)));
    for (int64_t k = 0; k < s.K; ++k) r.weights[size_t(t * s.K + k)] = float(z[size_t(k)] / sum);
  }
  return r;
}

struct GradField {
  const char* name;
  std::vector<double> ReferenceParams::*param;
  std::vector<double> ReferenceResult::*grad;
};
const GradField kGradFields[] = {
    {"x", &ReferenceParams::x, &ReferenceResult::dx},
    {"w1", &ReferenceParams::w1, &ReferenceResult::dw1},
    {"w3", &ReferenceParams::w3, &ReferenceResult::dw3},
    {"w2", &ReferenceParams::w2, &ReferenceResult::dw2},
    {"sw1", &ReferenceParams::sw1, &ReferenceResult::dsw1},
    {"sw3", &ReferenceParams::sw3, &ReferenceResult::dsw3},
    {"sw2", &ReferenceParams::sw2, &ReferenceResult::dsw2},
};

// Central differences of the loss over every element of every differentiated parameter.
void expect_grads_match_finite_differences(const MoeConfig& cfg, ReferenceParams p, const Routing& r) {
  const ReferenceResult res = reference_forward(cfg, p, r, /*with_grads=*/true);
  ASSERT_TRUE(res.has_grads);
  for (const GradField& f : kGradFields) {
    std::vector<double>& v = p.*f.param;
    std::vector<double> fd(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double v0 = v[i], step = 1e-6 * std::max(1.0, std::abs(v0));
      v[i] = v0 + step;
      const double up = reference_forward(cfg, p, r, false).loss;
      v[i] = v0 - step;
      const double down = reference_forward(cfg, p, r, false).loss;
      v[i] = v0;
      fd[i] = (up - down) / (2 * step);
    }
    ASSERT_EQ((res.*f.grad).size(), fd.size()) << f.name;
    EXPECT_LT(relative_error(res.*f.grad, fd), 1e-6) << "d loss / d " << f.name;
  }
}

struct FdCase {
  const char* name;
  Shape shape;
  CapacityPolicy policy;
  double capacity_factor;
  std::function<std::vector<int32_t>(const Shape&, uint64_t seed)> ids;
};

// Every token on experts 0 and 2 (in either order): expert 1 gets no rows.
std::vector<int32_t> skip_expert_1(const Shape& s, uint64_t seed) {
  const uint64_t key = derive_key(seed, kStreamTestIds);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < s.T; ++t) {
    const bool swap = random_bits(key, uint64_t(t)) & 1;
    ids.push_back(swap ? 2 : 0);
    ids.push_back(swap ? 0 : 2);
  }
  return ids;
}

// Expert 0 is every token's first choice: with cap = 2 it loses 4 of its 6 rows, experts 1 and 2 one each.
std::vector<int32_t> skewed_6x2(const Shape&, uint64_t) {
  return {0, 1, 0, 2, 0, 1, 0, 2, 1, 0, 2, 0};
}

const FdCase kFdCases[] = {
    {"no_shared", {5, 4, 3, 3, 2, 0}, CapacityPolicy::none, 0, random_ids},
    {"shared", {5, 4, 3, 3, 2, 2}, CapacityPolicy::none, 0, random_ids},
    {"k1", {5, 4, 3, 3, 1, 2}, CapacityPolicy::none, 0, random_ids},
    {"k_equals_e", {5, 4, 3, 3, 3, 2}, CapacityPolicy::none, 0, random_ids},
    {"expert_without_tokens", {5, 4, 3, 3, 2, 2}, CapacityPolicy::none, 0, skip_expert_1},
    {"all_tokens_one_expert",
     {5, 4, 3, 3, 1, 2},
     CapacityPolicy::none,
     0,
     [](const Shape& s, uint64_t) { return std::vector<int32_t>(size_t(s.T * s.K), 1); }},
    // cap = max(1, ceil(0.5 * 12 / 3)) = 2.
    {"capacity_drop", {6, 4, 3, 3, 2, 2}, CapacityPolicy::drop, 0.5, skewed_6x2},
    {"capacity_pad", {6, 4, 3, 3, 2, 2}, CapacityPolicy::pad, 0.5, skewed_6x2},
};

TEST(Reference, GradientsMatchFiniteDifferences) {
  const uint64_t seed = testing::test_seed();
  for (const FdCase& c : kFdCases) {
    SCOPED_TRACE(c.name);
    const MoeConfig cfg = config_for(c.shape, c.policy, c.capacity_factor);
    const Routing r = routing_with(c.shape, c.ids(c.shape, seed), seed);
    expect_grads_match_finite_differences(cfg, reference_params(random_inputs(cfg, seed)), r);
  }
}

TEST(Reference, ExpertWithoutTokensGetsZeroGradient) {
  const uint64_t seed = testing::test_seed();
  const Shape s{5, 4, 3, 3, 2, 2};
  const MoeConfig cfg = config_for(s);
  const Routing r = routing_with(s, skip_expert_1(s, seed), seed);
  const ReferenceResult res = reference_forward(cfg, random_inputs(cfg, seed), r, true);
  const int64_t n = s.H * s.M;
  for (int64_t i = n; i < 2 * n; ++i) {
    EXPECT_EQ(res.dw1[size_t(i)], 0.0);
    EXPECT_EQ(res.dw3[size_t(i)], 0.0);
    EXPECT_EQ(res.dw2[size_t(i)], 0.0);
  }
}

// T = E = K = H = M = 1, x = 2, w1 = 0.5, w3 = 3, w2 = -1, routing weight 0.25, and for S = 1
// sw1 = -0.25, sw3 = 1.5, sw2 = 2. Expected values from the closed form evaluated in `bc -l` (30 digits):
//   y = 0.25 * -1 * silu(1) * 6 + 2 * silu(-0.5) * 3,  loss = y^2,  dy = 2y, and the chain rule by hand.
struct HandCase {
  int64_t S;
  double y, loss, dx, dw1, dw3, dw2, dsw1, dsw3, dsw2;
};

TEST(Reference, HandComputedScalarBlock) {
  const HandCase cases[] = {
      {0, -1.096587867945007318876738862733, 1.202504952124176810105902643531,
       2.728413295277087664939197678313, 6.103633372611643419333180139140, 0.801669968082784540070601762352,
       -2.405009904248353620211805287060, 0, 0, 0},
      {1, -2.229209874339443624960037165495, 4.969376663852478036969757383982,
       9.810378328577945494747633887696, 12.407833591184665697287750354146, 1.629683002202565443483163124804,
       -4.889049006607696330449489374414, -13.912346135434408267647511321452,
       3.366469547398173162326683595698, 2.524852160548629871745012696774},
  };
  for (const HandCase& c : cases) {
    SCOPED_TRACE("S=" + std::to_string(c.S));
    const MoeConfig cfg = config_for({1, 1, 1, 1, 1, c.S});
    ReferenceParams p{{2.0}, {0.5}, {3.0}, {-1.0}, {}, {}, {}};
    if (c.S == 1) {
      p.sw1 = {-0.25};
      p.sw3 = {1.5};
      p.sw2 = {2.0};
    }
    const Routing r{1, 1, 1, {0}, {0.25f}};

    const ReferenceResult fwd = reference_forward(cfg, p, r, false);
    EXPECT_FALSE(fwd.has_grads);
    EXPECT_TRUE(fwd.dx.empty());

    const ReferenceResult res = reference_forward(cfg, p, r, true);
    const double tol = 1e-14;
    ASSERT_EQ(res.out.size(), 1u);
    EXPECT_NEAR(res.out[0], c.y, tol * std::abs(c.y));
    EXPECT_NEAR(res.loss, c.loss, tol * c.loss);
    EXPECT_NEAR(res.dx[0], c.dx, tol * std::abs(c.dx));
    EXPECT_NEAR(res.dw1[0], c.dw1, tol * std::abs(c.dw1));
    EXPECT_NEAR(res.dw3[0], c.dw3, tol * std::abs(c.dw3));
    EXPECT_NEAR(res.dw2[0], c.dw2, tol * std::abs(c.dw2));
    ASSERT_EQ(res.dsw1.size(), size_t(c.S));
    if (c.S == 1) {
      EXPECT_NEAR(res.dsw1[0], c.dsw1, tol * std::abs(c.dsw1));
      EXPECT_NEAR(res.dsw3[0], c.dsw3, tol * std::abs(c.dsw3));
      EXPECT_NEAR(res.dsw2[0], c.dsw2, tol * std::abs(c.dsw2));
    }
  }
}

void expect_same_result(const ReferenceResult& a, const ReferenceResult& b) {
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dw1, b.dw1);
  EXPECT_EQ(a.dw3, b.dw3);
  EXPECT_EQ(a.dw2, b.dw2);
  EXPECT_EQ(a.dsw1, b.dsw1);
  EXPECT_EQ(a.dsw3, b.dsw3);
  EXPECT_EQ(a.dsw2, b.dsw2);
}

// A dropped assignment contributes exactly what a zero routing weight would: nothing. Adding zeros does
// not change a double, so the results must match bit for bit.
TEST(Reference, CapacityKeepsFirstAssignmentsInFlatOrder) {
  const uint64_t seed = testing::test_seed();
  const Shape s{4, 4, 3, 3, 2, 2};
  // Flat order a:   0  1 | 2  3 | 4  5 | 6  7
  const std::vector<int32_t> ids = {0, 1, 1, 0, 2, 1, 0, 2};
  const Routing r = routing_with(s, ids, seed);
  const MoeInputs in = random_inputs(config_for(s), seed);

  struct Expectation {
    double capacity_factor;
    int64_t cap;
    std::vector<int> kept;  // (A)
  };
  const Expectation expectations[] = {
      // cap = max(1, ceil(0.25 * 8 / 3)) = 1: the first row of each expert (a = 0, 1, 4).
      {0.25, 1, {1, 1, 0, 0, 1, 0, 0, 0}},
      // cap = ceil(0.5 * 8 / 3) = 2: expert 0 keeps a = 0, 3 (drops 6); expert 1 keeps 1, 2 (drops 5);
      // expert 2 keeps both its rows, 4 and 7.
      {0.5, 2, {1, 1, 1, 1, 1, 0, 0, 1}},
  };
  for (const Expectation& x : expectations) {
    Routing masked = r;
    for (size_t a = 0; a < ids.size(); ++a)
      if (!x.kept[a]) masked.weights[a] = 0.0f;
    const ReferenceResult expected = reference_forward(config_for(s), in, masked, true);
    for (CapacityPolicy policy : {CapacityPolicy::drop, CapacityPolicy::pad}) {
      SCOPED_TRACE(std::string(name(policy)) + " cap=" + std::to_string(x.cap));
      const MoeConfig cfg = config_for(s, policy, x.capacity_factor);
      ASSERT_EQ(cfg.capacity(), x.cap);
      expect_same_result(reference_forward(cfg, in, r, true), expected);
    }
  }
  // Sanity: capacity really removed something.
  const ReferenceResult none = reference_forward(config_for(s), in, r, false);
  const ReferenceResult cap1 = reference_forward(config_for(s, CapacityPolicy::drop, 0.25), in, r, false);
  EXPECT_GT(relative_error(cap1.out, none.out), 1e-3);
}

// Null slots (ids >= E) contribute nothing and are no expert's rows, so they do not use up capacity.
TEST(Reference, NullIdsContributeNothing) {
  const uint64_t seed = testing::test_seed();
  const Shape s{4, 4, 3, 3, 2, 2};
  const std::vector<int32_t> ids = {3, 0, 4, 1, 2, 3, 0, 5};
  const Routing r = routing_with(s, ids, seed);
  Routing zeroed = r;
  for (size_t a = 0; a < ids.size(); ++a) {
    if (ids[a] >= s.E) {
      zeroed.ids[a] = 0;
      zeroed.weights[a] = 0.0f;
    }
  }
  const MoeInputs in = random_inputs(config_for(s), seed);
  expect_same_result(reference_forward(config_for(s), in, r, true),
                     reference_forward(config_for(s), in, zeroed, true));

  // cap = 1: expert 0's real rows are a = 1 and 6, and the null before a = 1 does not count, so a = 1
  // survives and only a = 6 is dropped.
  const MoeConfig capped = config_for(s, CapacityPolicy::drop, 0.25);
  ASSERT_EQ(capped.capacity(), 1);
  Routing drop6 = r;
  drop6.weights[6] = 0.0f;
  expect_same_result(reference_forward(capped, in, r, true),
                     reference_forward(config_for(s), in, drop6, true));
}

// bf16 inputs are read exactly: the same values held in float32 give the identical result.
TEST(Reference, ReadsBf16InputsExactly) {
  const uint64_t seed = testing::test_seed();
  const Shape s{6, 8, 5, 3, 2, 4};
  MoeConfig cfg = config_for(s);
  cfg.dtype = Dtype::bf16;
  const MoeInputs bf = random_inputs(cfg, seed, Dtype::bf16);
  MoeInputs f32;
  f32.x = bf.x.to(Dtype::f32);
  f32.w1 = bf.w1.to(Dtype::f32);
  f32.w3 = bf.w3.to(Dtype::f32);
  f32.w2 = bf.w2.to(Dtype::f32);
  f32.sw1 = bf.sw1.to(Dtype::f32);
  f32.sw3 = bf.sw3.to(Dtype::f32);
  f32.sw2 = bf.sw2.to(Dtype::f32);
  const ReferenceParams p = reference_params(bf);
  for (int64_t i = 0; i < bf.w1.numel(); ++i)
    ASSERT_EQ(p.w1[size_t(i)], double(bf16_to_f32(bf.w1.data<bf16_t>()[i])));

  const Routing r = routing_with(s, random_ids(s, seed), seed);
  MoeConfig cfg32 = cfg;
  cfg32.dtype = Dtype::f32;
  expect_same_result(reference_forward(cfg, bf, r, true), reference_forward(cfg32, f32, r, true));
}

// Every sum runs in a fixed order, so the thread count cannot change a single bit. The shape is large
// enough for the reference to use threads at all.
TEST(Reference, IndependentOfThreadCount) {
  const uint64_t seed = testing::test_seed();
  const Shape s{129, 32, 24, 4, 2, 8};
  const MoeConfig cfg = config_for(s);
  const MoeInputs in = random_inputs(cfg, seed);
  const Routing r = routing_with(s, random_ids(s, seed), seed);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const ReferenceResult one = reference_forward(cfg, in, r, true);
  omp_set_num_threads(3);
  const ReferenceResult three = reference_forward(cfg, in, r, true);
  omp_set_num_threads(saved);
  expect_same_result(one, three);
}

TEST(Reference, RelativeError) {
  EXPECT_EQ(relative_error({}, {}), 0.0);
  EXPECT_EQ(relative_error({0.0, 0.0}, {0.0, 0.0}), 0.0);
  EXPECT_DOUBLE_EQ(relative_error({3.0, 4.0}, {0.0, 0.0}), 5.0 / 1e-300);
  EXPECT_DOUBLE_EQ(relative_error({1.0, 1.0}, {1.0, 2.0}), 1.0 / std::sqrt(5.0));
}

}  // namespace
}  // namespace moe
