// The fast block against the float64 reference: every impl x backend x dtype x pass x remat x capacity
// combination on odd shapes with fresh inputs, plus the MoE edge grid (empty experts, all tokens on
// one expert, K=1, K=E, S=0 and S>0, T not a multiple of the tile, both permute modes, all pack
// strategies). Tolerances are check_tolerance(dtype) (moe/check.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "moe/block.h"
#include "moe/check.h"
#include "moe/gemm.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/routing.h"
#include "test_util.h"

namespace moe {
namespace {

MoeConfig small_config(uint64_t seed) {
  MoeConfig c;
  c.tokens = 37;  // not a multiple of any tile
  c.hidden = 24;
  c.mlp_dim = 20;
  c.experts = 5;
  c.topk = 2;
  c.shared_expert_dim = 0;
  c.seed = seed;
  return c;
}

// Runs the block once in the config's pass and checks it; returns the check for extra assertions.
CheckResult run_and_check(const MoeConfig& c, const Routing& routing, const KernelConfig& k = {}) {
  MoeInputs in = make_inputs(c);
  MoeBlock block(c, k);
  Tensor out(c.dtype, {c.tokens, c.hidden});
  CheckResult r;
  if (c.bench_pass == BenchPass::forward_backward) {
    MoeGrads grads = make_grads(c);
    block.forward_backward(out, grads, in, routing);
    r = check_against_reference(c, in, routing, out, &grads);
  } else {
    block.forward(out, in, routing);
    r = check_against_reference(c, in, routing, out, nullptr);
  }
  return r;
}

std::string describe(const MoeConfig& c) {
  return fmt::format(
      "impl={} backend={} dtype={} pass={} remat={} cap={}/{} S={} fused_shared={} K={} E={} T={}",
      name(c.impl), name(c.backend), dtype_name(c.dtype), name(c.bench_pass), name(c.remat_mode),
      name(c.capacity_policy), c.capacity_factor, c.shared_expert_dim, c.shared_fused, c.topk, c.experts,
      c.tokens);
}

TEST(Block, EveryCombinationMatchesReference) {
  const uint64_t seed = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (BackendKind be : {BackendKind::gmm, BackendKind::ragged_dot})
      for (Impl impl : kAllImpls)
        for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
          for (RematMode remat : {RematMode::none, RematMode::expert_mlp, RematMode::combine})
            for (CapacityPolicy cap : {CapacityPolicy::none, CapacityPolicy::drop, CapacityPolicy::pad}) {
              if (pass == BenchPass::forward && remat != RematMode::none)
                continue;  // remat is a backward notion
              MoeConfig c = small_config(seed);
              c.dtype = dt;
              c.backend = be;
              c.impl = impl;
              c.bench_pass = pass;
              c.remat_mode = remat;
              c.capacity_policy = cap;
              c.capacity_factor = cap == CapacityPolicy::none ? 0.0 : 0.8;
              c.shared_expert_dim = (int(impl) + int(cap)) % 2 ? 12 : 0;
              c.shared_fused = int(remat) % 2 == 0;
              Routing routing = make_routing(c);
              CheckResult r = run_and_check(c, routing);
              EXPECT_TRUE(r.pass) << describe(c) << " out_err=" << r.out_rel_err
                                  << " grad_err=" << r.grad_rel_err << " tol=" << r.tol;
            }
}

// Edge grid with hand-made routings.
struct EdgeCase {
  const char* label;
  int64_t tokens, experts, topk;
  std::function<int32_t(int64_t t, int64_t k)> expert;
};

TEST(Block, EdgeGridMatchesReference) {
  const uint64_t seed = testing::test_seed();
  std::vector<EdgeCase> cases = {
      {"all tokens on one expert", 19, 4, 1, [](int64_t, int64_t) { return 2; }},
      {"empty experts", 23, 6, 2, [](int64_t t, int64_t k) { return int32_t((t + k) % 2 == 0 ? 1 : 4); }},
      {"K=E", 11, 3, 3, [](int64_t t, int64_t k) { return int32_t((t + k) % 3); }},
      {"K=1", 17, 5, 1, [](int64_t t, int64_t) { return int32_t(t % 5); }},
      {"one token", 1, 3, 2, [](int64_t, int64_t k) { return int32_t(2 - k); }},
  };
  for (const EdgeCase& ec : cases)
    for (Dtype dt : {Dtype::f32, Dtype::bf16})
      for (BackendKind be : {BackendKind::gmm, BackendKind::ragged_dot})
        for (int64_t S : {0, 8}) {
          MoeConfig c = small_config(seed);
          c.tokens = ec.tokens;
          c.experts = ec.experts;
          c.topk = ec.topk;
          c.dtype = dt;
          c.backend = be;
          c.shared_expert_dim = S;
          c.bench_pass = BenchPass::forward_backward;
          c.impl = S ? Impl::baseline : Impl::fast;
          std::vector<int32_t> ids;
          std::vector<float> weights;
          for (int64_t t = 0; t < c.tokens; ++t)
            for (int64_t k = 0; k < c.topk; ++k) {
              ids.push_back(ec.expert(t, k));
              weights.push_back(1.0f / float(c.topk) + 0.05f * float(k));
            }
          Routing routing = routing_from(c.tokens, c.topk, c.experts, ids, weights);
          CheckResult r = run_and_check(c, routing);
          EXPECT_TRUE(r.pass) << ec.label << ": " << describe(c) << " out_err=" << r.out_rel_err
                              << " grad_err=" << r.grad_rel_err;
        }
}

TEST(Block, PackStrategiesPermuteModesAndTilesAgree) {
  const uint64_t seed = testing::test_seed();
  for (PackStrategy ps : {PackStrategy::argsort, PackStrategy::tuple_sort, PackStrategy::expert_score_sort})
    for (PermuteMode pm : {PermuteMode::direct_take, PermuteMode::repeat_sort})
      for (int64_t tile : {1, 8, 64}) {
        MoeConfig c = small_config(seed);
        c.use_custom_sort_vjp = tile == 8;
        c.pack_strategy = ps;
        c.permute_mode = pm;
        c.dtype = Dtype::f32;
        c.bench_pass = BenchPass::forward_backward;
        c.distribution = Distribution::runs;
        KernelConfig k;
        k.gmm_tile_rows = tile;
        CheckResult r = run_and_check(c, make_routing(c), k);
        EXPECT_TRUE(r.pass) << name(ps) << " " << name(pm) << " tile=" << tile << " err=" << r.out_rel_err;
      }
}

TEST(Block, NullRoutingMatchesReferenceEverywhere) {
  const uint64_t seed = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (BackendKind be : {BackendKind::gmm, BackendKind::ragged_dot})
      for (Impl impl : kAllImpls)
        for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
          for (NullRoutingMode mode : {NullRoutingMode::independent, NullRoutingMode::take_until_null}) {
            MoeConfig c = small_config(seed);
            c.dtype = dt;
            c.backend = be;
            c.impl = impl;
            c.bench_pass = pass;
            c.remat_mode = int(impl) % 2 ? RematMode::expert_mlp : RematMode::none;
            c.shared_expert_dim = int(impl) % 3 == 0 ? 8 : 0;
            c.null_routing.frac = 0.4;
            c.null_routing.mode = mode;
            c.null_routing.renormalize = int(impl) % 2 == 0;
            NullRoutingStats stats;
            Routing routing = make_routing(c, &stats);
            ASSERT_GT(stats.null_assignments, 0);
            CheckResult r = run_and_check(c, routing);
            EXPECT_TRUE(r.pass) << describe(c) << " null mode=" << name(mode) << " out_err=" << r.out_rel_err
                                << " grad_err=" << r.grad_rel_err;
          }
}

// Null slots cost nothing and add nothing: the fast output equals the one where the same assignments
// keep a real expert with weight 0.
TEST(Block, NullSlotsContributeNothing) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.dtype = Dtype::f32;
  c.null_routing.frac = 0.5;
  Routing nulled = make_routing(c);
  MoeConfig plain_cfg = c;
  plain_cfg.null_routing.frac = 0;
  Routing zeroed = make_routing(plain_cfg);
  for (size_t a = 0; a < zeroed.ids.size(); ++a)
    if (nulled.ids[a] >= c.experts) zeroed.weights[a] = 0;
  MoeInputs in = make_inputs(c);
  Tensor out_null(c.dtype, {c.tokens, c.hidden}), out_zero(c.dtype, {c.tokens, c.hidden});
  MoeBlock null_block(c, {});
  null_block.forward(out_null, in, nulled);
  MoeConfig scatter_cfg = plain_cfg;
  scatter_cfg.impl = Impl::scatter;  // null routing forces scatter combine; compare like with like
  MoeBlock zero_block(scatter_cfg, {});
  zero_block.forward(out_zero, in, zeroed);
  EXPECT_LT(null_block.plan().live_rows, zero_block.plan().live_rows) << "null rows must not reach the GEMMs";
  for (int64_t i = 0; i < out_null.numel(); ++i)
    ASSERT_NEAR(out_null.get(i), out_zero.get(i), 1e-5 * std::max(1.0f, std::fabs(out_zero.get(i)))) << i;
}

TEST(Block, EveryGemmVariantRunsTheBlock) {
  const uint64_t seed = testing::test_seed();
  for (const GemmVariant& v : gemm_variants()) {
    ASSERT_TRUE(select_gemm_variant(v.name));
    for (Dtype dt : {Dtype::f32, Dtype::bf16})
      for (Impl impl : {Impl::baseline, Impl::fast}) {
        MoeConfig c = small_config(seed);
        c.dtype = dt;
        c.impl = impl;
        c.shared_expert_dim = 6;
        c.shared_fused = impl == Impl::fast;
        c.bench_pass = BenchPass::forward_backward;
        CheckResult r = run_and_check(c, make_routing(c));
        EXPECT_TRUE(r.pass) << v.name << " " << describe(c) << " grad_err=" << r.grad_rel_err;
      }
  }
  select_gemm_variant("auto");
}

TEST(Block, RematRecomputesAndSavesLess) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.bench_pass = BenchPass::forward_backward;
  c.dtype = Dtype::f32;
  MoeInputs in = make_inputs(c);
  Routing routing = make_routing(c);
  auto run = [&](RematMode remat, Tensor& out, MoeGrads& grads) {
    MoeConfig cc = c;
    cc.remat_mode = remat;
    MoeBlock block(cc, {});
    block.forward_backward(out, grads, in, routing);
    return block.saved_activation_bytes();
  };
  Tensor out_none(c.dtype, {c.tokens, c.hidden}), out_remat(c.dtype, {c.tokens, c.hidden});
  MoeGrads g_none = make_grads(c), g_remat = make_grads(c);
  int64_t saved_none = run(RematMode::none, out_none, g_none);
  int64_t saved_remat = run(RematMode::expert_mlp, out_remat, g_remat);
  EXPECT_LT(saved_remat, saved_none);
  // Recompute is exact: same kernels on the same inputs.
  for (int64_t i = 0; i < g_none.dw1.numel(); ++i) ASSERT_EQ(g_none.dw1.get(i), g_remat.dw1.get(i)) << i;
  for (int64_t i = 0; i < g_none.dx.numel(); ++i) ASSERT_EQ(g_none.dx.get(i), g_remat.dx.get(i)) << i;
}

TEST(Block, RepeatedCallsAreStable) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.bench_pass = BenchPass::forward_backward;
  MoeInputs in = make_inputs(c);
  Routing routing = make_routing(c);
  MoeBlock block(c, {});
  Tensor a(c.dtype, {c.tokens, c.hidden}), b(c.dtype, {c.tokens, c.hidden});
  MoeGrads ga = make_grads(c), gb = make_grads(c);
  block.forward_backward(a, ga, in, routing);
  block.forward_backward(b, gb, in, routing);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.get(i), b.get(i));
  for (int64_t i = 0; i < ga.dw2.numel(); ++i) ASSERT_EQ(ga.dw2.get(i), gb.dw2.get(i));
}

}  // namespace
}  // namespace moe
