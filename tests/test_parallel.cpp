// The block over 1-4 ranks as threads (make_thread_comms, the ref backend's ops) for every parallel
// mode and comm path,
// against the single-process run of the same global inputs and routing and against the float64
// oracle (--check's rule): fresh random inputs (seed printed), the MoE edge grid (empty experts, all
// tokens on one expert, odd T, K=1, K=E), ranks that receive no rows, shared expert, null routing,
// every impl and both layouts. Each rank draws only its slices of the inputs (make_rank_inputs).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <thread>

#include "moe/null_routing.h"
#include "parallel_cases.h"
#include "test_util.h"

namespace moe {
namespace {

using parallel_cases::Results;

// The global results of cfg run over `ranks` thread ranks (rank 0's meter), on the ref backend: the cpu
// backend's GEMM state (oneDNN's plans and scratch) is one per process, for one caller at a time, so
// ranks as threads of one process run the plain ops; tests/mpi/ runs the cpu backend in processes.
Results run_ranks(const MoeConfig& cfg, const Routing& routing, int ranks) {
  std::vector<std::unique_ptr<Comm>> comms = make_thread_comms(ranks);
  Results res;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      omp_set_num_threads(1);
      Results mine = parallel_cases::run_rank(*comms[size_t(r)], cfg, routing, "ref");
      if (r == 0) res = mine;
    });
  for (std::thread& t : threads) t.join();
  return res;
}

// Runs cfg over `ranks` ranks and on one, and checks both against the oracle and each other.
void expect_matches_single_process(const MoeConfig& cfg, const Routing& routing, int ranks) {
  SCOPED_TRACE(parallel_cases::describe(cfg, ranks));
  const Results single = run_ranks(parallel_cases::single_process(cfg), routing, 1);
  parallel_cases::expect_same_results(cfg, routing, run_ranks(cfg, routing, ranks), single);
}

struct Path {
  ParallelMode mode;
  EpCommPath path;
};
const Path kPaths[] = {{ParallelMode::dp, EpCommPath::compact_psum},
                       {ParallelMode::ep, EpCommPath::compact_psum},
                       {ParallelMode::ep, EpCommPath::all_to_all},
                       {ParallelMode::ep, EpCommPath::ring_ag_rs},
                       {ParallelMode::ep, EpCommPath::masked_psum}};

std::string path_name(const Path& p) {
  return p.mode == ParallelMode::dp ? "dp" : std::string("ep_") + name(p.path);
}

class ParallelBlock : public ::testing::TestWithParam<Path> {};

// The MoE edge grid as hand-made routings: whole ranks of experts receive no rows, or every row.
struct EdgeCase {
  const char* label;
  int64_t tokens, experts, topk;
  std::function<int32_t(int64_t t, int64_t k)> expert;
};
const std::vector<EdgeCase>& edge_cases() {
  static const std::vector<EdgeCase> cases = {
      {"all tokens on one expert", 19, 4, 1, [](int64_t, int64_t) { return 2; }},
      {"empty experts", 23, 6, 2, [](int64_t t, int64_t k) { return int32_t((t + k) % 2 == 0 ? 1 : 4); }},
      {"K=E", 11, 4, 4, [](int64_t t, int64_t k) { return int32_t((t + k) % 4); }},
      {"K=1 odd T", 17, 4, 1, [](int64_t t, int64_t) { return int32_t(t % 4); }},
      {"one expert's rank gets all", 9, 6, 2, [](int64_t, int64_t k) { return int32_t(k); }},
  };
  return cases;
}

MoeConfig base_config(uint64_t seed, const Path& p) {
  MoeConfig c;
  c.tokens = 37;
  c.hidden = 24;
  c.mlp_dim = 20;
  c.experts = 12;  // divisible by 1, 2, 3, 4
  c.topk = 2;
  c.seed = int64_t(seed);
  c.parallel_mode = p.mode;
  c.ep_comm_path = p.path;
  if (p.path == EpCommPath::ring_ag_rs) c.tokens = 36;  // T % R == 0 for R = 1..4
  return c;
}

// Fresh random inputs and routing, every impl, both layouts and dtypes, forward and forward_backward,
// with and without a shared expert, over 1-4 ranks.
TEST_P(ParallelBlock, MatchesTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  int i = 0;
  for (int ranks : {1, 2, 3, 4})
    for (Impl impl : kAllImpls)
      for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
        MoeConfig c = base_config(seed, GetParam());
        c.impl = impl;
        c.bench_pass = pass;
        c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
        c.gemm_backend = i % 3 ? GemmBackend::gmm : GemmBackend::ragged_dot;
        c.shared_expert_dim = i % 4 < 2 ? 8 : 0;
        c.shared_fused = i % 5 == 0;
        c.remat_mode = i % 7 == 0 ? RematMode::expert_mlp : RematMode::none;
        c.distribution = i % 2 ? Distribution::runs : Distribution::random;
        ++i;
        expect_matches_single_process(c, make_routing(c), ranks);
      }
}

// The MoE edge grid with hand-made routings: whole ranks of experts receive no rows, or every row.
TEST_P(ParallelBlock, EdgeGridMatchesTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  for (const EdgeCase& ec : edge_cases())
    for (int ranks : {2, 3, 4})
      for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
        MoeConfig c = base_config(seed, GetParam());
        // ring_ag_rs needs T % R == 0: the case's T rounded up to a multiple of 12.
        c.tokens = GetParam().path == EpCommPath::ring_ag_rs ? (ec.tokens + 11) / 12 * 12 : ec.tokens;
        c.experts = ec.experts;
        c.topk = ec.topk;
        c.dtype = dt;
        c.bench_pass = BenchPass::forward_backward;
        c.shared_expert_dim = dt == Dtype::f32 ? 8 : 0;
        c.impl = dt == Dtype::f32 ? Impl::fused_w13_preweight : Impl::fast;
        if (!parallel_supports(c, ranks)) continue;  // E % R
        SCOPED_TRACE(ec.label);
        expect_matches_single_process(c, testing::edge_routing(c.tokens, c.topk, c.experts, ec.expert),
                                      ranks);
      }
}

TEST_P(ParallelBlock, NullRoutingMatchesTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = base_config(seed, GetParam());
  c.bench_pass = BenchPass::forward_backward;
  c.null_routing.frac = 0.3;
  c.null_routing.renormalize = true;
  for (int ranks : {2, 4}) expect_matches_single_process(c, make_routing(c), ranks);
}

// Data x expert meshes: every path over 4 ranks as 2 replicas of 2 expert shards, and as 4 x 1 and
// 1 x 4; dp as data=4,expert=1.
TEST_P(ParallelBlock, MeshesMatchTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  const bool dp = GetParam().mode == ParallelMode::dp;
  int i = 0;
  for (auto [D, X] : {std::pair{2, 2}, {4, 1}, {1, 4}}) {
    if (dp && X != 1) continue;
    for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
      MoeConfig c = base_config(seed, GetParam());
      c.mesh_data = D;
      c.mesh_expert = X;
      c.tokens = 40;  // T % 4 == 0 (ring)
      c.bench_pass = pass;
      c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
      c.shared_expert_dim = 8;
      c.impl = kAllImpls[size_t(i) % kAllImpls.size()];
      ++i;
      expect_matches_single_process(c, make_routing(c), 4);
    }
  }
}

// The int8 quant modes over 2 and 4 ranks (each rank quantizes its own slices: per-row, per-expert and
// per-column scales never span ranks, so the single-process values), with a shared expert, fused and split.
TEST_P(ParallelBlock, QuantModesMatchTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  int i = 0;
  for (QuantMode q :
       {QuantMode::int8, QuantMode::int8_routed, QuantMode::int8_all, QuantMode::int8_routed_prequant})
    for (int ranks : {2, 4}) {
      MoeConfig c = base_config(seed, GetParam());
      c.quant_mode = q;
      c.bench_pass = i % 3 == 2 ? BenchPass::forward : BenchPass::forward_backward;
      c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
      c.impl = kAllImpls[size_t(i) % kAllImpls.size()];
      c.shared_expert_dim = 8;
      c.shared_fused = i % 2 == 0;
      ++i;
      expect_matches_single_process(c, make_routing(c), ranks);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ParallelBlock, ::testing::ValuesIn(kPaths),
                         [](const auto& info) { return path_name(info.param); });

// What each path moves per rank per step: all_to_all sends only the rows of other ranks' experts.
TEST(ParallelBlockComm, EachPathMovesItsModeledBytes) {
  const uint64_t seed = testing::test_seed();
  MoeConfig c = base_config(seed, {ParallelMode::ep, EpCommPath::all_to_all});
  c.dtype = Dtype::f32;
  const Routing routing = make_routing(c);
  const Results a2a = run_ranks(c, routing, 2);
  // Rank 0 holds tokens [0, T/2) and experts [0, E/2): it sends the rows of its tokens for experts
  // E/2.. (and their weights) and sends back the outputs of rank 1's rows for its experts.
  int64_t out = 0, back = 0;
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t k = 0; k < c.topk; ++k) {
      const bool mine = t < c.tokens / 2, my_expert = routing.ids[size_t(t * c.topk + k)] < c.experts / 2;
      out += mine && !my_expert;
      back += !mine && my_expert;
    }
  const int64_t per_call = (c.experts / 2) * 8 + out * 4 + (out + back) * c.hidden * 4;
  EXPECT_EQ(a2a.meter.bytes, 2 * per_call);  // two forward calls
  c.ep_comm_path = EpCommPath::compact_psum;
  const Results psum = run_ranks(c, routing, 2);
  EXPECT_EQ(psum.meter.bytes, 2 * c.tokens * c.hidden * 4);  // 2 calls x one all-reduce of (T, H) f32
}

// The peak each path's bytes are measured against: an all-to-all where rows travel, an all-reduce
// where sums do, each of the step's largest message; a row's comm time at those peaks is positive and
// every rank of a collective agrees on what it probed.
TEST(ParallelBlockComm, ThePeakProbesTheStepsCollectives) {
  MoeConfig c = base_config(testing::test_seed(), {ParallelMode::ep, EpCommPath::all_to_all});
  c.dtype = Dtype::f32;
  const Routing routing = make_routing(c);
  for (EpCommPath path : {EpCommPath::all_to_all, EpCommPath::compact_psum}) {
    c.ep_comm_path = path;
    std::vector<std::unique_ptr<Comm>> comms = make_thread_comms(2);
    std::vector<parallel_cases::Results> res(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        res[size_t(r)] =
            parallel_cases::run_rank(*comms[size_t(r)], c, routing, "ref", /*measure_peak=*/true);
      });
    for (std::thread& t : threads) t.join();
    const bool a2a = path == EpCommPath::all_to_all;
    for (const parallel_cases::Results& r : res) {
      SCOPED_TRACE(name(path));
      // Forward: all_to_all moves rows (and counts, weights) by all-to-all only; compact_psum sums.
      EXPECT_EQ(r.meter.a2a_bytes, a2a ? r.meter.bytes : 0);
      EXPECT_EQ(r.peak.a2a_gbps > 0, a2a);
      EXPECT_EQ(r.peak.reduce_gbps > 0, !a2a);
      EXPECT_GT(r.peak.ideal_seconds(r.meter), 0);
      // The largest message: a2a the rows a rank sends (its live rows, to both ranks); psum (T, H) f32.
      if (a2a) {
        EXPECT_EQ(r.meter.a2a.dtype, Dtype::f32);
        EXPECT_EQ(r.meter.a2a.elements % c.hidden, 0);
      } else {
        EXPECT_EQ(r.meter.reduce.elements, c.tokens * c.hidden);
        EXPECT_EQ(r.meter.a2a.comm, nullptr);
      }
    }
  }
}

// --ep-overlap: the rows in chunks, each chunk's dispatch overlapping the experts of the one before,
// give the results of one exchange and move the same bytes: 2-4 ranks, chunks that some groups have
// fewer rows than, forward and forward_backward (each chunk's backward on its own forward's rows). The
// output and dx are the one exchange's bit for bit on the ref backend (a row's depend on its own row
// alone); the routed weight gradients are summed over the chunks (each chunk's rounded to the run
// dtype, the sum in f32), so they equal it within the dtype's tolerance, and the oracle checks all.
TEST(ParallelBlockOverlap, ChunksGiveTheResultsOfOneExchange) {
  const uint64_t seed = testing::test_seed();
  int i = 0;
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
    for (int ranks : {2, 3, 4})
      for (int64_t chunks : {2, 3, 7}) {
        MoeConfig c = base_config(seed, {ParallelMode::ep, EpCommPath::all_to_all});
        c.bench_pass = pass;
        c.impl = kAllImpls[size_t(i) % kAllImpls.size()];
        c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
        c.shared_expert_dim = i % 3 ? 8 : 0;
        c.gemm_backend = i % 2 ? GemmBackend::gmm : GemmBackend::ragged_dot;
        c.remat_mode = i % 4 == 3 ? RematMode::expert_mlp : RematMode::none;
        ++i;
        const Routing routing = make_routing(c);
        const Results plain = run_ranks(c, routing, ranks);
        c.ep_overlap = chunks;
        SCOPED_TRACE(parallel_cases::describe(c, ranks) + " ep_overlap=" + std::to_string(chunks));
        const Results overlapped = run_ranks(c, routing, ranks);
        EXPECT_EQ(overlapped.out.to_f64(), plain.out.to_f64());
        EXPECT_EQ(overlapped.meter.bytes, plain.meter.bytes);
        if (pass == BenchPass::forward) continue;
        ASSERT_TRUE(overlapped.grads && plain.grads);
        EXPECT_EQ(overlapped.grads->dx.to_f64(), plain.grads->dx.to_f64());
        parallel_cases::expect_same_results(c, routing, overlapped, plain);
      }
}

// Overlapped chunks on a data x expert mesh and where whole ranks receive no rows, against the
// single-process run and the oracle.
TEST(ParallelBlockOverlap, MeshesAndIdleRanksMatchTheSingleProcessRun) {
  MoeConfig c = base_config(testing::test_seed(), {ParallelMode::ep, EpCommPath::all_to_all});
  c.ep_overlap = 2;
  c.tokens = 40;
  c.shared_expert_dim = 8;
  c.mesh_data = 2;
  c.mesh_expert = 2;
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
    c.bench_pass = pass;
    expect_matches_single_process(c, make_routing(c), 4);
  }
  c.mesh_data = c.mesh_expert = 0;
  c.experts = 4;
  c.topk = 1;
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
    c.bench_pass = pass;
    expect_matches_single_process(
        c, testing::edge_routing(c.tokens, 1, 4, [](int64_t, int64_t) { return 3; }), 4);
  }
}

// impl ref_dp, the seed's DP baseline (spec §5.5): tokens sharded over 1-4 data ranks (and a data=4
// mesh), weights replicated, its 256-row blocks, its softmax-over-E routing with and without
// renormalizing, forward and forward_backward (the weight gradients summed over ranks): the
// single-process run and the oracle, fresh inputs and the edge grid.
TEST(ParallelRefDp, MatchesTheSingleProcessRun) {
  const uint64_t seed = testing::test_seed();
  int i = 0;
  for (int ranks : {1, 2, 3, 4})
    for (Dtype dt : {Dtype::f32, Dtype::bf16})
      for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
        MoeConfig c = base_config(seed, {ParallelMode::dp, EpCommPath::compact_psum});
        c.impl = Impl::ref_dp;
        c.dtype = dt;
        c.bench_pass = pass;
        c.renormalize_topk = i % 2 == 1;
        c.distribution = i % 3 == 2 ? Distribution::runs : Distribution::random;
        if (ranks == 4 && dt == Dtype::bf16) c.mesh_data = 4, c.mesh_expert = 1;
        ++i;
        expect_matches_single_process(c, make_routing(c), ranks);
      }
  for (const EdgeCase& ec : edge_cases())
    for (int ranks : {2, 4}) {
      MoeConfig c = base_config(seed, {ParallelMode::dp, EpCommPath::compact_psum});
      c.impl = Impl::ref_dp;
      c.bench_pass = ranks == 2 ? BenchPass::forward : BenchPass::forward_backward;
      c.tokens = ec.tokens;
      c.experts = ec.experts;
      c.topk = ec.topk;
      SCOPED_TRACE(ec.label);
      expect_matches_single_process(c, testing::edge_routing(c.tokens, c.topk, c.experts, ec.expert), ranks);
    }
}

// What the seed's baseline never ran is one clear line.
TEST(ParallelRefDp, WhatTheSeedsBaselineNeverRanIsRefused) {
  MoeConfig c = base_config(1, {ParallelMode::dp, EpCommPath::compact_psum});
  c.impl = Impl::ref_dp;
  EXPECT_TRUE(c.validate().is_ok());
  c.bench_pass = BenchPass::forward_backward;
  EXPECT_TRUE(c.validate().is_ok());
  const auto refused = [](MoeConfig bad, const char* what) {
    const Status s = bad.validate();
    EXPECT_FALSE(s.is_ok()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  MoeConfig bad = c;
  bad.shared_expert_dim = 8;
  refused(bad, "a shared expert is not part of it");
  bad = c;
  bad.parallel_mode = ParallelMode::ep;
  refused(bad, "--parallel-mode ep (ref_dp replicates the weights");
  bad = c;
  bad.null_routing.frac = 0.2;
  refused(bad, "null routing is not part of it");
  bad = c;
  bad.capacity_policy = CapacityPolicy::drop;
  bad.capacity_factor = 1.0;
  refused(bad, "a capacity policy is not part of it");
  bad = c;
  bad.quant_mode = QuantMode::int8_routed;
  refused(bad, "a quant mode is not part of it");
  for (RematMode remat : {RematMode::expert_mlp, RematMode::combine}) {
    bad = c;
    bad.remat_mode = remat;
    refused(bad, fmt::format("--remat-mode {} (", name(remat)).c_str());
  }
  bad = c;
  bad.impl = Impl::fused_w13;
  bad.renormalize_topk = true;
  refused(bad, "--renormalize-topk is the seed's profile-harness routing");
}

TEST(ParallelLayout, BadMeshesAreOneClearLine) {
  MoeConfig c = base_config(1, {ParallelMode::ep, EpCommPath::all_to_all});
  c.experts = 10;
  Status s = parallel_supports(c, 4);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--experts=10 must be divisible by the 4 expert ranks"), std::string::npos)
      << s.message();
  c.experts = 12;
  c.tokens = 3;
  s = parallel_supports(c, 4);
  EXPECT_NE(s.message().find("--tokens=3 cannot be split over 4 ranks"), std::string::npos) << s.message();
  c.parallel_mode = ParallelMode::none;
  s = parallel_supports(c, 2);
  EXPECT_NE(s.message().find("--parallel-mode none runs on one rank"), std::string::npos) << s.message();
  c.tokens = 40;
  c.parallel_mode = ParallelMode::ep;
  c.mesh_data = 3;
  c.mesh_expert = 2;
  s = parallel_supports(c, 4);
  EXPECT_NE(s.message().find("--mesh data=3,expert=2 is 6 ranks, but 4 were started"), std::string::npos)
      << s.message();
  c.parallel_mode = ParallelMode::dp;
  c.mesh_data = 2;
  s = parallel_supports(c, 4);
  EXPECT_NE(s.message().find("a mesh with expert=2 is --parallel-mode ep"), std::string::npos) << s.message();
  // --ep-overlap: the all_to_all path only, forward and forward_backward.
  c = base_config(1, {ParallelMode::ep, EpCommPath::compact_psum});
  c.ep_overlap = 2;
  s = parallel_supports(c, 2);
  EXPECT_NE(s.message().find("--ep-overlap=2 overlaps the rows' all-to-all"), std::string::npos)
      << s.message();
  c.ep_comm_path = EpCommPath::all_to_all;
  EXPECT_TRUE(parallel_supports(c, 2).is_ok());
  c.bench_pass = BenchPass::forward_backward;
  EXPECT_TRUE(parallel_supports(c, 2).is_ok());
}

// masked_psum (the seed's first EP, spec §5.2): a rank's plan holds every real assignment, the other
// ranks' experts' on a local expert with weight 0 (computed, adding nothing); null ones stay null.
TEST(ParallelLayout, MaskedPsumKeepsEveryAssignmentWeighingZero) {
  MoeConfig c = base_config(testing::test_seed(), {ParallelMode::ep, EpCommPath::masked_psum});
  c.null_routing.frac = 0.25;
  const Routing global = make_routing(c);
  for (int r = 0; r < 3; ++r) {
    const RankLayout l = rank_layout(c, r, 3);
    const Routing mine = rank_routing(global, l);
    ASSERT_EQ(mine.ids.size(), global.ids.size());
    int64_t masked = 0;
    for (size_t i = 0; i < global.ids.size(); ++i) {
      const int32_t g = global.ids[i];
      const bool real = g >= 0 && g < c.experts, own = g >= l.expert_begin && g < l.expert_begin + l.experts;
      if (!real) {
        EXPECT_EQ(mine.ids[i], l.experts);
        continue;
      }
      EXPECT_LT(mine.ids[i], l.experts);
      EXPECT_EQ(mine.weights[i], own ? global.weights[i] : 0.0f);
      masked += !own;
    }
    EXPECT_GT(masked, 0);
  }
}

// A rank's slices are the global tensors' rows, bit for bit.
TEST(ParallelLayout, RankInputsAreSlicesOfTheGlobalInputs) {
  MoeConfig c = base_config(testing::test_seed(), {ParallelMode::ep, EpCommPath::all_to_all});
  c.shared_expert_dim = 4;
  const MoeInputs all = make_inputs(c);
  for (int r = 0; r < 3; ++r) {
    const RankLayout l = rank_layout(c, r, 3);
    const MoeInputs mine = make_rank_inputs(c, l);
    for (int64_t i = 0; i < mine.x.numel(); ++i)
      ASSERT_EQ(mine.x.get(i), all.x.get(l.token_begin * c.hidden + i));
    const int64_t HM = c.hidden * c.mlp_dim;
    for (int64_t i = 0; i < mine.w2.numel(); ++i)
      ASSERT_EQ(mine.w2.get(i), all.w2.get(l.expert_begin * HM + i));
    for (int64_t i = 0; i < mine.w13.numel(); ++i)
      ASSERT_EQ(mine.w13.get(i), all.w13.get(l.expert_begin * 2 * HM + i));
    EXPECT_EQ(mine.sw2.to_f64(), all.sw2.to_f64());
  }
}

}  // namespace
}  // namespace moe
