// The whole block on every registered backend against the float64 reference (moe/reference.h, the
// independent oracle behind --check): every impl x layout x dtype x pass x remat x capacity on odd
// shapes with fresh inputs, plus the MoE edge grid (empty experts, all tokens on one expert, K=1, K=E,
// S=0 and S>0, T not a multiple of the tile, both permute modes, all pack strategies), null routing,
// the prequeue path, remat, repeated calls, thread-count independence, and the exchange hooks.
// Tolerances are --check's (moe/conditioned_check.h): check_tolerance(dtype), raised only where the
// problem's measured conditioning demands it (tiny T in bf16). A backend that cannot run a configuration
// (any backend without its device, e.g. cuda on a machine with no GPU) reports the case SKIPPED with
// its reason.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <iostream>

#include "cpu/gemm/gemm.h"
#include "moe/backend.h"
#include "moe/block.h"
#include "moe/check.h"
#include "moe/conditioned_check.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/reference.h"
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

std::string describe(const MoeConfig& c) {
  return fmt::format(
      "impl={} backend={} dtype={} pass={} remat={} cap={}/{} S={} fused_shared={} K={} E={} T={}",
      name(c.impl), name(c.gemm_backend), dtype_name(c.dtype), name(c.bench_pass), name(c.remat_mode),
      name(c.capacity_policy), c.capacity_factor, c.shared_expert_dim, c.shared_fused, c.topk, c.experts,
      c.tokens);
}

// One block run on a backend, its results copied to the host.
struct BlockRun {
  Tensor out;
  std::optional<MoeGrads> grads;
  int64_t saved_bytes = 0;
  PlanStats plan;
};

enum class Call { full, prequeue };

BlockRun run_block(Backend& be, const MoeConfig& c, const MoeInputs& host_in, const Routing& routing,
                   Call call = Call::full, Comm* comm = nullptr) {
  std::unique_ptr<Comm> local = make_local_comm();
  MoeBlock block(c, be, comm ? *comm : *local);
  const MoeInputs in = to_memory(host_in, be.memory());
  const RoutingTensors r = to_memory(routing, be.memory());
  Tensor out = be.empty(c.dtype, {c.tokens, c.hidden});
  BlockRun run;
  if (c.bench_pass == BenchPass::forward_backward) {
    MoeGrads grads = make_grads(c, be.memory());
    EXPECT_TRUE(block.forward_backward(out, grads, in, r).is_ok());
    run.grads = to_host(grads);
  } else if (call == Call::prequeue) {
    EXPECT_TRUE(block.prepare_dispatch(in, r).is_ok());
    EXPECT_TRUE(block.forward_prepared(out, in, r).is_ok());
  } else {
    EXPECT_TRUE(block.forward(out, in, r).is_ok());
  }
  be.synchronize();
  run.out = out.to_host();
  run.saved_bytes = block.saved_activation_bytes();
  run.plan = block.plan_stats();
  return run;
}

// --check's rule: the dtype's floor, raised where the problem is ill-conditioned (moe/conditioned_check.h:
// at T = 1 in bf16 a gradient can cancel so that one rounding moves it 4 %, past the fixed 2e-2).
ConditionedCheck check_run(const MoeConfig& c, const MoeInputs& in, const Routing& routing,
                           const BlockRun& run) {
  return check_conditioned(c, in, routing, run.out, run.grads ? &*run.grads : nullptr);
}

class BlockOnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  Backend& backend() { return testing::test_backend(GetParam()); }

  // Runs cfg on this backend and checks it against the reference; false (with the reason recorded)
  // when the backend cannot run cfg.
  bool run_and_check(const MoeConfig& c, const Routing& routing, const KernelConfig& k = {},
                     Call call = Call::full) {
    if (Status s = backend().supports_block(c); !s) {
      skipped_ = s.message();
      return false;
    }
    const MoeInputs in = make_inputs(c);
    const ConditionedCheck r =
        check_run(c, in, routing, run_block(testing::test_backend(GetParam(), k), c, in, routing, call));
    EXPECT_TRUE(r.pass) << describe(c) << " out_err=" << r.out_rel_err << " grad_err=" << r.grad_rel_err
                        << " worst=" << r.worst.name << " err=" << r.worst.rel_err << " tol=" << r.worst.tol
                        << " sens=" << r.worst.sensitivity;
    ++ran_;
    return true;
  }
  // Call last: SKIPPED when nothing could run.
  void skip_if_nothing_ran() {
    if (ran_ == 0) GTEST_SKIP() << GetParam() << ": " << skipped_;
  }

 private:
  int ran_ = 0;
  std::string skipped_;
};

TEST_P(BlockOnBackend, EveryCombinationMatchesReference) {
  const uint64_t seed = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
    for (GemmBackend be : {GemmBackend::gmm, GemmBackend::ragged_dot})
      for (Impl impl : kAllImpls)
        for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
          for (RematMode remat : {RematMode::none, RematMode::expert_mlp, RematMode::combine})
            for (CapacityPolicy cap : {CapacityPolicy::none, CapacityPolicy::drop, CapacityPolicy::pad}) {
              if (pass == BenchPass::forward && remat != RematMode::none) continue;  // a backward notion
              MoeConfig c = small_config(seed);
              c.dtype = dt;
              c.gemm_backend = be;
              c.impl = impl;
              c.bench_pass = pass;
              c.remat_mode = remat;
              c.capacity_policy = cap;
              c.capacity_factor = cap == CapacityPolicy::none ? 0.0 : 0.8;
              c.shared_expert_dim = (int(impl) + int(cap)) % 2 ? 12 : 0;
              c.shared_fused = int(remat) % 2 == 0;
              c.matmul_precision =
                  int(cap) == 1 ? MatmulPrecision::highest : MatmulPrecision::default_precision;
              run_and_check(c, make_routing(c));
            }
  skip_if_nothing_ran();
}

// impl ref_dp (the seed's DP baseline) on one process: its 256-row blocks and per-block weight copies
// (and, forward_backward, per-block weight gradients summed per expert) against the oracle, fresh and
// edge routings (an expert over two blocks, empty experts), both dtypes and passes, renormalized or not.
TEST_P(BlockOnBackend, RefDpMatchesReference) {
  const uint64_t seed = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
    for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
      for (bool renormalize : {false, true}) {
        MoeConfig c = small_config(seed);
        c.tokens = 300;  // more than one block of rows
        c.impl = Impl::ref_dp;
        c.dtype = dt;
        c.bench_pass = pass;
        c.renormalize_topk = renormalize;
        run_and_check(c, make_routing(c));
        run_and_check(c, testing::edge_routing(c.tokens, c.topk, c.experts, [](int64_t t, int64_t k) {
                        return int32_t(k ? 3 : t % 9 == 0);
                      }));
        c.tokens = 19;
        run_and_check(c, testing::edge_routing(c.tokens, c.topk, c.experts,
                                               [](int64_t t, int64_t k) { return int32_t(k ? 4 : t % 2); }));
      }
  skip_if_nothing_ran();
}

// The int8 quant modes (spec §6) against the quantization-aware reference: every mode x impl x layout x
// dtype x pass x remat, with capacity, a shared expert (int8 in int8 and int8_all, fused and split) and
// null routing mixed in, and the edge grid.
TEST_P(BlockOnBackend, QuantModesMatchTheQuantizedReference) {
  const uint64_t seed = testing::test_seed();
  for (QuantMode q :
       {QuantMode::int8, QuantMode::int8_routed, QuantMode::int8_routed_prequant, QuantMode::int8_all})
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      for (GemmBackend be : {GemmBackend::gmm, GemmBackend::ragged_dot})
        for (Impl impl : kAllImpls)
          for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
            for (RematMode remat : {RematMode::none, RematMode::expert_mlp}) {
              if (pass == BenchPass::forward && remat != RematMode::none) continue;
              MoeConfig c = small_config(seed);
              c.quant_mode = q;
              c.dtype = dt;
              c.gemm_backend = be;
              c.impl = impl;
              c.bench_pass = pass;
              c.remat_mode = remat;
              const int variant = int(impl) + int(be) + int(dt);
              c.capacity_policy = variant % 3 == 1 ? CapacityPolicy::drop : CapacityPolicy::none;
              c.capacity_factor = c.capacity_policy == CapacityPolicy::none ? 0.0 : 0.8;
              // int8 quantizes the shared expert only: mostly with one (without, it runs none's GEMMs).
              c.shared_expert_dim = quantizes_dense(q) ? (variant % 5 == 4 ? 0 : 12) : (variant % 2 ? 12 : 0);
              c.shared_fused = (variant + int(pass)) % 2 == 0;
              if (variant % 4 == 3) c.null_routing.frac = 0.25;
              run_and_check(c, make_routing(c));
            }
  skip_if_nothing_ran();
}

// The int8 check can fail: a float run (what a kernel that skipped quantizing would give) is far outside
// the int8 tolerance against the quantized reference, forward and backward.
TEST(BlockInt8, AFloatRunFailsTheQuantizedCheck) {
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
    MoeConfig c = small_config(testing::test_seed());
    c.dtype = Dtype::f32;
    c.bench_pass = pass;
    const MoeInputs in = make_inputs(c);
    const Routing routing = make_routing(c);
    const BlockRun run = run_block(testing::test_backend("cpu"), c, in, routing);
    c.quant_mode = QuantMode::int8_routed;
    const ConditionedCheck r = check_run(c, in, routing, run);
    EXPECT_FALSE(r.pass) << name(pass);
    EXPECT_GT(r.out_rel_err, 3 * kInt8CheckTolerance) << name(pass);
  }
  // And in int8, where only the shared expert's GEMMs are quantized: a float shared expert fails.
  for (bool fused : {false, true}) {
    MoeConfig c = small_config(testing::test_seed());
    c.dtype = Dtype::f32;
    c.bench_pass = BenchPass::forward_backward;
    c.shared_expert_dim = 24;
    c.shared_fused = fused;
    const MoeInputs in = make_inputs(c);
    const Routing routing = make_routing(c);
    const BlockRun run = run_block(testing::test_backend("cpu"), c, in, routing);
    c.quant_mode = QuantMode::int8;
    const ConditionedCheck r = check_run(c, in, routing, run);
    EXPECT_FALSE(r.pass) << "fused " << fused;
    EXPECT_GT(r.grad_rel_err, kInt8CheckTolerance) << "fused " << fused;
  }
}

// Zero inputs (every scale is the smallest) give zeros, never NaN or Inf, in every quant mode.
TEST_P(BlockOnBackend, QuantModesOfZeroInputsGiveZeros) {
  MoeConfig probe = small_config(1);
  probe.quant_mode = QuantMode::int8_routed;
  if (Status s = backend().supports_block(probe); !s) GTEST_SKIP() << GetParam() << ": " << s.message();
  for (QuantMode q :
       {QuantMode::int8, QuantMode::int8_routed, QuantMode::int8_all, QuantMode::int8_routed_prequant})
    for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
      MoeConfig c = small_config(testing::test_seed());
      c.quant_mode = q;
      c.bench_pass = pass;
      c.dtype = Dtype::bf16;
      c.shared_expert_dim = 8;
      c.shared_fused = pass == BenchPass::forward;
      if (!backend().supports_block(c)) continue;
      MoeInputs in = make_inputs(c);
      for (Tensor* t : {&in.x, &in.w1, &in.w3, &in.w2, &in.w13, &in.sw1, &in.sw3, &in.sw2, &in.sw13})
        t->fill_zero();
      if (q == QuantMode::int8_routed_prequant)
        for (QuantizedWeight* w : {&in.q13, &in.q1, &in.q3, &in.q2})
          if (!w->empty()) {
            w->q.fill_zero();
            w->qt.fill_zero();
            for (int64_t e = 0; e < w->scale.numel(); ++e) w->scale.set(e, FLT_MIN);
          }
      const BlockRun run = run_block(backend(), c, in, make_routing(c));
      for (int64_t i = 0; i < run.out.numel(); ++i) ASSERT_EQ(run.out.get(i), 0.0) << name(q) << " out " << i;
      if (!run.grads) continue;
      for (const Tensor* g : {&run.grads->dx, &run.grads->dw1, &run.grads->dw3, &run.grads->dw2,
                              &run.grads->dsw1, &run.grads->dsw3, &run.grads->dsw2})
        for (int64_t i = 0; i < g->numel(); ++i) ASSERT_EQ(g->get(i), 0.0) << name(q) << " grad " << i;
    }
}

// Edge grid with hand-made routings.
struct EdgeCase {
  const char* label;
  int64_t tokens, experts, topk;
  std::function<int32_t(int64_t t, int64_t k)> expert;
};

TEST_P(BlockOnBackend, EdgeGridMatchesReference) {
  const uint64_t seed = testing::test_seed();
  const std::vector<EdgeCase> cases = {
      {"all tokens on one expert", 19, 4, 1, [](int64_t, int64_t) { return 2; }},
      {"empty experts", 23, 6, 2, [](int64_t t, int64_t k) { return int32_t((t + k) % 2 == 0 ? 1 : 4); }},
      {"K=E", 11, 3, 3, [](int64_t t, int64_t k) { return int32_t((t + k) % 3); }},
      {"K=1", 17, 5, 1, [](int64_t t, int64_t) { return int32_t(t % 5); }},
      {"one token", 1, 3, 2, [](int64_t, int64_t k) { return int32_t(2 - k); }},
  };
  for (const EdgeCase& ec : cases)
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      for (GemmBackend be : {GemmBackend::gmm, GemmBackend::ragged_dot})
        for (int64_t S : {0, 8}) {
          SCOPED_TRACE(ec.label);
          MoeConfig c = small_config(seed);
          // The int8 modes meet the edge grid too (quantized reference): with a shared expert, int8_all
          // and int8 (the shared GEMMs) in f32, prequant in bf16.
          const QuantMode with_shared = be == GemmBackend::gmm ? QuantMode::int8_all : QuantMode::int8;
          c.quant_mode = S ? (dt == Dtype::f32 ? with_shared : QuantMode::int8_routed_prequant)
                           : (dt == Dtype::f32 ? QuantMode::int8_routed : QuantMode::none);
          c.tokens = ec.tokens;
          c.experts = ec.experts;
          c.topk = ec.topk;
          c.dtype = dt;
          c.gemm_backend = be;
          c.shared_expert_dim = S;
          c.bench_pass = BenchPass::forward_backward;
          c.impl = S ? Impl::baseline : Impl::fast;
          run_and_check(c, testing::edge_routing(c.tokens, c.topk, c.experts, ec.expert));
        }
  skip_if_nothing_ran();
}

TEST_P(BlockOnBackend, PackStrategiesPermuteModesAndTilesAgree) {
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
        SCOPED_TRACE(fmt::format("{} {} tile={}", name(ps), name(pm), tile));
        run_and_check(c, make_routing(c), k);
      }
  skip_if_nothing_ran();
}

TEST_P(BlockOnBackend, NullRoutingMatchesReferenceEverywhere) {
  const uint64_t seed = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
    for (GemmBackend be : {GemmBackend::gmm, GemmBackend::ragged_dot})
      for (Impl impl : kAllImpls)
        for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
          for (NullRoutingMode mode : {NullRoutingMode::independent, NullRoutingMode::take_until_null}) {
            MoeConfig c = small_config(seed);
            c.dtype = dt;
            c.gemm_backend = be;
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
            SCOPED_TRACE(name(mode));
            run_and_check(c, routing);
          }
  skip_if_nothing_ran();
}

TEST_P(BlockOnBackend, PrequeueMatchesReferenceAndTheFullCall) {
  const uint64_t seed = testing::test_seed();
  for (Impl impl : kAllImpls)
    for (int64_t S : {0, 6}) {
      MoeConfig c = small_config(seed);
      c.impl = impl;
      c.dtype = Dtype::f32;
      c.shared_expert_dim = S;
      const Routing routing = make_routing(c);
      if (!run_and_check(c, routing, {}, Call::prequeue)) continue;
      const MoeInputs in = make_inputs(c);
      const BlockRun full = run_block(backend(), c, in, routing),
                     pre = run_block(backend(), c, in, routing, Call::prequeue);
      EXPECT_EQ(full.out.to_f64(), pre.out.to_f64()) << describe(c);
    }
  skip_if_nothing_ran();
}

// Null slots cost nothing and add nothing: the output equals the one where the same assignments keep a
// real expert with weight 0.
TEST_P(BlockOnBackend, NullSlotsContributeNothing) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.dtype = Dtype::f32;
  c.null_routing.frac = 0.5;
  if (Status s = backend().supports_block(c); !s) GTEST_SKIP() << s.message();
  Routing nulled = make_routing(c);
  MoeConfig plain_cfg = c;
  plain_cfg.null_routing.frac = 0;
  Routing zeroed = make_routing(plain_cfg);
  for (size_t a = 0; a < zeroed.ids.size(); ++a)
    if (nulled.ids[a] >= c.experts) zeroed.weights[a] = 0;
  const MoeInputs in = make_inputs(c);
  MoeConfig scatter_cfg = plain_cfg;
  scatter_cfg.impl = Impl::scatter;  // null routing forces scatter combine; compare like with like
  const BlockRun with_nulls = run_block(backend(), c, in, nulled);
  const BlockRun with_zeros = run_block(backend(), scatter_cfg, in, zeroed);
  EXPECT_LT(with_nulls.plan.live_rows, with_zeros.plan.live_rows) << "null rows must not reach the GEMMs";
  // The two runs multiply groups of different row counts (null rows are absent, zero-weight rows are
  // not), which GEMM libraries block differently: float32 sums may differ by roundings of the summands,
  // whose size is the output's scale, not each element's (an element near cancellation moved 1.75e-5 of
  // itself at seed 513756369). A token given a null slot's row would move by the scale itself.
  double scale = 1.0;
  for (int64_t i = 0; i < with_zeros.out.numel(); ++i)
    scale = std::max(scale, std::fabs(with_zeros.out.get(i)));
  for (int64_t i = 0; i < with_nulls.out.numel(); ++i)
    ASSERT_NEAR(with_nulls.out.get(i), with_zeros.out.get(i), 1e-5 * scale) << i;
}

TEST_P(BlockOnBackend, RematRecomputesAndSavesLess) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.bench_pass = BenchPass::forward_backward;
  c.dtype = Dtype::f32;
  if (Status s = backend().supports_block(c); !s) GTEST_SKIP() << s.message();
  const MoeInputs in = make_inputs(c);
  const Routing routing = make_routing(c);
  MoeConfig remat = c;
  remat.remat_mode = RematMode::expert_mlp;
  const BlockRun kept = run_block(backend(), c, in, routing),
                 recomputed = run_block(backend(), remat, in, routing);
  EXPECT_LT(recomputed.saved_bytes, kept.saved_bytes);
  // Recompute is exact: same kernels on the same inputs.
  EXPECT_EQ(kept.grads->dw1.to_f64(), recomputed.grads->dw1.to_f64());
  EXPECT_EQ(kept.grads->dx.to_f64(), recomputed.grads->dx.to_f64());
}

TEST_P(BlockOnBackend, RepeatedCallsAreStable) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.bench_pass = BenchPass::forward_backward;
  c.shared_expert_dim = 8;
  c.shared_fused = true;
  if (Status s = backend().supports_block(c); !s) GTEST_SKIP() << s.message();
  std::unique_ptr<Comm> comm = make_local_comm();
  MoeBlock block(c, backend(), *comm);
  const MoeInputs in = to_memory(make_inputs(c), backend().memory());
  const RoutingTensors routing = to_memory(make_routing(c), backend().memory());
  Tensor a = backend().empty(c.dtype, {c.tokens, c.hidden}),
         b = backend().empty(c.dtype, {c.tokens, c.hidden});
  MoeGrads ga = make_grads(c, backend().memory()), gb = make_grads(c, backend().memory());
  ASSERT_TRUE(block.forward_backward(a, ga, in, routing).is_ok());
  const double loss = block.loss();
  ASSERT_TRUE(block.forward_backward(b, gb, in, routing).is_ok());
  EXPECT_EQ(block.loss(), loss);
  EXPECT_EQ(a.to_host().to_f64(), b.to_host().to_f64());
  EXPECT_EQ(ga.dw2.to_host().to_f64(), gb.dw2.to_host().to_f64());
  EXPECT_EQ(ga.dsw1.to_host().to_f64(), gb.dsw1.to_host().to_f64());
}

INSTANTIATE_TEST_SUITE_P(Backends, BlockOnBackend, ::testing::ValuesIn(testing::backend_names()),
                         testing::param_name);

// --------------------------------------------------------------------------------- cpu-specific

TEST(BlockCpu, EveryGemmVariantRunsTheBlock) {
  const uint64_t seed = testing::test_seed();
  for (const GemmVariant& v : gemm_variants()) {
    if (const std::string why = v.unavailable(); !why.empty()) {
      std::cout << "variant " << v.name << " skipped: " << why << "\n";
      continue;
    }
    if (std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn)])) {
      std::cout << "variant " << v.name << " skipped: no float GEMMs (the float block's forms)\n";
      continue;
    }
    KernelConfig k;
    k.gemm_variant = v.name;
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      for (Impl impl : {Impl::baseline, Impl::fast}) {
        MoeConfig c = small_config(seed);
        c.dtype = dt;
        c.impl = impl;
        c.shared_expert_dim = 6;
        c.shared_fused = impl == Impl::fast;
        c.bench_pass = BenchPass::forward_backward;
        const MoeInputs in = make_inputs(c);
        const Routing routing = make_routing(c);
        (void)take_kernel_choices(testing::test_backend("cpu", k));
        const ConditionedCheck r =
            check_run(c, in, routing, run_block(testing::test_backend("cpu", k), c, in, routing));
        EXPECT_TRUE(r.pass) << v.name << " " << describe(c) << " grad_err=" << r.grad_rel_err;
        // Each form ran the named variant's row, or one the table names after it where it does not take it
        // (amx takes no float32 inputs: every form of a float32 block then runs a later row).
        const std::string ran = take_kernel_choices(testing::test_backend("cpu", k));
        GemmCall up;
        up.form = GemmForm::nn;
        // A float16 block's GEMMs reach the variants widened to float32 (cpu/gemm/f16_widening.h).
        up.in_dtype = up.b_dtype = up.out_dtype = dt == Dtype::f16 ? Dtype::f32 : dt;
        std::vector<int64_t> per_expert(size_t(c.experts), 0);  // live rows a group: the call's largest
        for (int32_t id : routing.ids)
          if (id >= 0 && id < c.experts) ++per_expert[size_t(id)];
        up.rows = *std::max_element(per_expert.begin(), per_expert.end());
        up.experts = c.experts;
        up.Kd = c.hidden;
        up.N = 2 * c.mlp_dim;
        const std::string refused = v.supports(up, k.thresholds);
        if (refused.empty())
          EXPECT_NE(ran.find(std::string(":") + v.name), std::string::npos) << v.name << ": " << ran;
        else
          EXPECT_EQ(ran.find(std::string(":") + v.name), std::string::npos)
              << v.name << " (" << refused << "): " << ran;
      }
  }
}

// The schedule never changes a result where the GEMM variant says so (OpenMP splits rows and columns,
// never a sum); elsewhere it moves results by their last bits only.
TEST(BlockCpu, ResultsIndependentOfThreadCount) {
  const uint64_t seed = testing::test_seed();
  Backend& cpu = testing::test_backend("cpu");
  const int threads_before = omp_get_max_threads();
  for (Impl impl : {Impl::baseline, Impl::fast, Impl::fused_w13_preweight})
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
      MoeConfig c = small_config(seed);
      c.tokens = 301;
      c.hidden = 64;
      c.impl = impl;
      c.dtype = dt;
      c.shared_expert_dim = 16;
      c.bench_pass = BenchPass::forward_backward;
      const MoeInputs in = make_inputs(c);
      const Routing routing = make_routing(c);
      // A variant whose sums change with the thread count (GemmVariant::same_sums_on_any_thread_count)
      // may move results by their last bits: a float32 rounding, or, where that flips a bf16 (float16)
      // rounding of h or g, one bf16 (float16) step carried through the block.
      // auto's choices are made once per shape class by the table of this KernelConfig, whatever the thread
      // count, so the three runs take the same kernels.
      (void)take_kernel_choices(cpu);
      const double last_bits_tolerance = dt == Dtype::f32 ? 1e-5 : dt == Dtype::f16 ? 2e-3 : 1e-2;
      std::vector<BlockRun> runs;
      std::vector<std::string> kernels;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        runs.push_back(run_block(cpu, c, in, routing));
        kernels.push_back(take_kernel_choices(cpu));
      }
      bool bitwise = kernels[0] == kernels[1] && kernels[0] == kernels[2];
      for (const GemmVariant& v : gemm_variants())
        if (kernels[0].find(std::string(":") + v.name) != std::string::npos ||
            kernels[0].find(std::string("+") + v.name) != std::string::npos)
          bitwise &= v.same_sums_on_any_thread_count();
      for (size_t i = 1; i < runs.size(); ++i) {
        SCOPED_TRACE(describe(c) + " run " + std::to_string(i) + " gemm kernels " + kernels[i]);
        const std::pair<const Tensor*, const Tensor*> pairs[] = {
            {&runs[i].out, &runs[0].out},
            {&runs[i].grads->dx, &runs[0].grads->dx},
            {&runs[i].grads->dw1, &runs[0].grads->dw1},
            {&runs[i].grads->dw2, &runs[0].grads->dw2},
            {&runs[i].grads->dsw3, &runs[0].grads->dsw3}};
        for (const auto& [now, first] : pairs) {
          if (bitwise) {
            EXPECT_EQ(now->to_f64(), first->to_f64());
          } else {
            EXPECT_LE(relative_error(now->to_f64(), first->to_f64()), last_bits_tolerance);
          }
        }
      }
    }
  omp_set_num_threads(threads_before);
}

// ------------------------------------------------------------------------------ exchange hooks

// A one-rank comm that records every collective the block issues (and what it was given), then does
// what the local comm does.
class RecordingComm final : public Comm {
 public:
  explicit RecordingComm(std::vector<std::string>* log) : log_(log), inner_(make_local_comm()) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "recording"; }
  Status all_reduce_sum(Tensor& data) override {
    log_->push_back(fmt::format("all_reduce_sum {} {}", dtype_name(data.dtype()), data.numel()));
    return inner_->all_reduce_sum(data);
  }
  Status all_gather(Tensor& recv, const Tensor& send) override {
    log_->push_back("all_gather");
    return inner_->all_gather(recv, send);
  }
  Status reduce_scatter_sum(Tensor& recv, const Tensor& send) override {
    log_->push_back("reduce_scatter_sum");
    return inner_->reduce_scatter_sum(recv, send);
  }
  Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                      const std::vector<int64_t>& send_counts) override {
    log_->push_back(fmt::format("all_to_all_v {} {}{}", dtype_name(send.dtype()), send_counts.at(0),
                                recv.same_storage(send) ? " in_place" : ""));
    return inner_->all_to_all_v(recv, recv_counts, send, send_counts);
  }
  Status barrier() override { return inner_->barrier(); }
  std::unique_ptr<Comm> split(int color, int key) override {
    log_->push_back("split");
    return std::make_unique<RecordingComm>(log_);
  }

 private:
  std::vector<std::string>* log_;
  std::unique_ptr<Comm> inner_;
};

TEST(BlockExchange, ForwardAndBackwardCrossTheCommAtTheirInsertionPoints) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = small_config(seed);
  c.bench_pass = BenchPass::forward_backward;
  c.dtype = Dtype::bf16;
  c.shared_expert_dim = 4;
  const MoeInputs in = make_inputs(c);
  const Routing routing = make_routing(c);
  std::vector<std::string> log;
  RecordingComm comm(&log);
  const BlockRun run = run_block(testing::test_backend("cpu"), c, in, routing, Call::full, &comm);
  EXPECT_TRUE(check_run(c, in, routing, run).pass);
  const int64_t max_rows = max_plan_rows(c, 64), rows_elems = max_rows * c.hidden;
  const int64_t EHM = c.experts * c.hidden * c.mlp_dim, HS = c.hidden * c.shared_expert_dim;
  const std::vector<std::string> want = {
      "split",                                                       // data group
      "split",                                                       // expert group
      "all_to_all_v int64 1 in_place",                               // after_plan: row counts
      fmt::format("all_to_all_v bfloat16 {} in_place", rows_elems),  // rows to their experts
      fmt::format("all_to_all_v bfloat16 {} in_place", rows_elems),  // expert outputs back
      fmt::format("all_to_all_v bfloat16 {} in_place", rows_elems),  // backward: dy rows out
      fmt::format("all_to_all_v float32 {} in_place", rows_elems),   // dx rows back
      fmt::format("all_reduce_sum bfloat16 {}", EHM),                // dw1
      fmt::format("all_reduce_sum bfloat16 {}", EHM),                // dw3
      fmt::format("all_reduce_sum bfloat16 {}", EHM),                // dw2
      fmt::format("all_reduce_sum bfloat16 {}", HS),                 // dsw1
      fmt::format("all_reduce_sum bfloat16 {}", HS),                 // dsw3
      fmt::format("all_reduce_sum bfloat16 {}", HS),                 // dsw2
  };
  EXPECT_EQ(log, want);
}

TEST(BlockExchange, UnbuiltCommPathsAreRefusedBeforeAllocation) {
  std::unique_ptr<Comm> comm = make_local_comm();
  MoeConfig c = small_config(1);
  c.parallel_mode = ParallelMode::ep;
  c.capacity_policy = CapacityPolicy::drop;
  c.capacity_factor = 1;
  const Status s = exchange_supports(c, *comm);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not implemented yet"), std::string::npos) << s.message();
  c.capacity_policy = CapacityPolicy::none;
  for (EpCommPath path :
       {EpCommPath::compact_psum, EpCommPath::all_to_all, EpCommPath::ring_ag_rs, EpCommPath::masked_psum}) {
    c.ep_comm_path = path;
    EXPECT_TRUE(exchange_supports(c, *comm).is_ok()) << name(path);
  }
}

}  // namespace
}  // namespace moe
