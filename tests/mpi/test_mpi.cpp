// Run under mpirun (CTest: 2 and 4 ranks, oversubscribed): the MPI comm's collectives on rank-stamped
// payloads (tests/comm_cases.h), then the block over the MPI world on every comm path against the
// single-process run and the float64 oracle (tests/parallel_cases.h), fresh inputs (rank 0 draws the
// seed and sends it to all), the edge grid, and a bad mesh refused alike on every rank.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>

#include "comm_cases.h"
#include "moe/comm.h"
#include "parallel_cases.h"
#include "test_util.h"

namespace moe {
namespace {

Comm& world() {
  return world_comm();
}

TEST(Mpi, IsTheWorldOfTheLaunch) {
  EXPECT_STREQ(world().name(), "mpi");
  EXPECT_GE(world().size(), 2);
  EXPECT_TRUE(world().barrier().is_ok());
}
TEST(Mpi, AllReduceSumsRankStampedPayloads) {
  comm_cases::all_reduce_sums_rank_stamped_payloads(world());
}
TEST(Mpi, AllGatherAndReduceScatterPlaceEachRanksSlice) {
  comm_cases::all_gather_and_reduce_scatter_place_each_ranks_slice(world());
}
TEST(Mpi, AllToAllVDeliversEachRowFromItsSender) {
  comm_cases::all_to_all_v_delivers_each_row_from_its_sender(world());
}
TEST(Mpi, GatherTextBringsEachRanksTextToRankZero) {
  comm_cases::gather_text_brings_each_ranks_text_to_rank_zero(world());
}
TEST(Mpi, SplitMakesDataByExpertMeshes) {
  comm_cases::split_makes_data_by_expert_meshes(world());
}

// One seed for all ranks: rank 0's fresh one (printed), summed with zeros from the others.
uint64_t shared_seed() {
  Tensor t(Dtype::f32, {1});
  t.set(0, world().rank() == 0 ? double(testing::fresh_seed() % 1000000) : 0.0);
  EXPECT_TRUE(world().all_reduce_sum(t).is_ok());
  const uint64_t seed = uint64_t(t.get(0));
  if (world().rank() == 0) std::printf("[ seed     ] MOE_TEST_SEED=%llu\n", (unsigned long long)seed);
  return seed;
}

void expect_matches_single_process(const MoeConfig& c, const Routing& routing) {
  SCOPED_TRACE(parallel_cases::describe(c, world().size()));
  const parallel_cases::Results multi = parallel_cases::run_rank(world(), c, routing);
  if (world().rank() != 0) return;
  std::unique_ptr<Comm> one = make_local_comm();
  const parallel_cases::Results single =
      parallel_cases::run_rank(*one, parallel_cases::single_process(c), routing);
  parallel_cases::expect_same_results(c, routing, multi, single);
}

// A small block of cfg's shape (T, E, K) on `path`, forward_backward in float32 unless changed.
MoeConfig block_config(uint64_t seed, int64_t tokens, int64_t experts, int64_t topk, ParallelMode mode,
                       EpCommPath path) {
  MoeConfig c;
  c.tokens = tokens;
  c.hidden = 24;
  c.mlp_dim = 20;
  c.experts = experts;
  c.topk = topk;
  c.seed = int64_t(seed);
  c.parallel_mode = mode;
  c.ep_comm_path = path;
  c.bench_pass = BenchPass::forward_backward;
  c.dtype = Dtype::f32;
  return c;
}

TEST(MpiBlock, EveryCommPathMatchesTheSingleProcessRun) {
  const uint64_t seed = shared_seed();
  int i = 0;
  for (ParallelMode mode : {ParallelMode::dp, ParallelMode::ep})
    for (EpCommPath path :
         {EpCommPath::compact_psum, EpCommPath::all_to_all, EpCommPath::ring_ag_rs, EpCommPath::masked_psum})
      for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
        if (mode == ParallelMode::dp && path != EpCommPath::compact_psum) continue;
        // ring: T % R == 0 (R = 2, 4)
        MoeConfig c = block_config(seed, path == EpCommPath::ring_ag_rs ? 44 : 41, 12, 3, mode, path);
        c.bench_pass = pass;
        c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
        c.impl = kAllImpls[size_t(i) % kAllImpls.size()];
        c.shared_expert_dim = i % 3 ? 8 : 0;
        ++i;
        expect_matches_single_process(c, make_routing(c));
      }
}

// impl ref_dp (the seed's DP baseline) over the MPI world on the cpu backend, whose kernel copies each
// 256-row block's weights and multiplies every block, and in the backward computes per-block weight
// gradients and sums them per expert: tokens sharded, weights replicated, forward and forward_backward,
// both dtypes, the softmax-over-E routing with and without renormalizing, and a routing that leaves a
// rank's experts empty and puts every row of another on one expert.
TEST(MpiBlock, RefDpMatchesTheSingleProcessRun) {
  const uint64_t seed = shared_seed();
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
    for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
      MoeConfig c = block_config(seed, 300, 12, 3, ParallelMode::dp, EpCommPath::compact_psum);
      c.impl = Impl::ref_dp;
      c.bench_pass = pass;
      c.dtype = dt;
      c.renormalize_topk = dt == Dtype::bf16;
      expect_matches_single_process(c, make_routing(c));
    }
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward}) {
    MoeConfig c = block_config(seed, 41, 6, 2, ParallelMode::dp, EpCommPath::compact_psum);
    c.impl = Impl::ref_dp;
    c.bench_pass = pass;
    expect_matches_single_process(
        c, testing::edge_routing(c.tokens, c.topk, c.experts,
                                 [](int64_t t, int64_t k) { return int32_t(t < 20 ? 2 + k : 5 * k); }));
  }
}

// On 4 ranks: each EP path on a 2 x 2 data x expert mesh.
TEST(MpiBlock, DataByExpertMeshes) {
  if (world().size() != 4) GTEST_SKIP() << "a 2 x 2 mesh needs 4 ranks";
  const uint64_t seed = shared_seed();
  for (EpCommPath path :
       {EpCommPath::compact_psum, EpCommPath::all_to_all, EpCommPath::ring_ag_rs, EpCommPath::masked_psum}) {
    MoeConfig c = block_config(seed, 44, 6, 2, ParallelMode::ep, path);
    c.mesh_data = 2;
    c.mesh_expert = 2;
    c.shared_expert_dim = 8;
    expect_matches_single_process(c, make_routing(c));
  }
}

// --ep-overlap over MPI (the cpu backend; the chunks' collectives on the comm thread), forward and
// forward_backward: the single-process results.
TEST(MpiBlock, OverlappedChunksMatchTheSingleProcessRun) {
  const uint64_t seed = shared_seed();
  for (BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
    for (int64_t chunks : {2, 3}) {
      MoeConfig c = block_config(seed, 41, 12, 3, ParallelMode::ep, EpCommPath::all_to_all);
      c.bench_pass = pass;
      c.ep_overlap = chunks;
      c.shared_expert_dim = chunks == 2 ? 8 : 0;
      c.dtype = chunks == 2 ? Dtype::f32 : Dtype::bf16;
      expect_matches_single_process(c, make_routing(c));
    }
}

// The int8 quant modes on the cpu backend's int8 kernels in processes: the single-process results.
TEST(MpiBlock, QuantModesMatchTheSingleProcessRun) {
  const uint64_t seed = shared_seed();
  int i = 0;
  for (QuantMode q : {QuantMode::int8, QuantMode::int8_all, QuantMode::int8_routed_prequant})
    for (EpCommPath path : {EpCommPath::compact_psum, EpCommPath::all_to_all}) {
      MoeConfig c = block_config(seed, 41, 12, 3, i % 3 ? ParallelMode::ep : ParallelMode::dp, path);
      c.quant_mode = q;
      c.shared_expert_dim = 8;
      c.shared_fused = i % 2 == 1;
      c.dtype = i % 2 ? Dtype::bf16 : Dtype::f32;
      c.impl = kAllImpls[size_t(i) % kAllImpls.size()];
      ++i;
      expect_matches_single_process(c, make_routing(c));
    }
}

// Every token on one expert: the ranks that own none receive no rows.
TEST(MpiBlock, RanksThatReceiveNoRows) {
  MoeConfig c = block_config(shared_seed(), 13, 4, 1, ParallelMode::ep, EpCommPath::all_to_all);
  c.shared_expert_dim = 4;
  std::vector<int32_t> ids(size_t(c.tokens), 3);
  std::vector<float> weights(size_t(c.tokens), 0.75f);
  expect_matches_single_process(c, routing_from(c.tokens, 1, c.experts, ids, weights));
}

TEST(MpiBlock, ABadMeshIsRefusedOnEveryRank) {
  MoeConfig c;
  c.experts = 2 * world().size() + 1;
  c.parallel_mode = ParallelMode::ep;
  const Status s = exchange_supports(c, world());
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("must be divisible"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  moe::Comm& world = moe::world_comm();
  omp_set_num_threads(1);
  // One report: rank 0's (a failure on another rank still fails the job through its exit code).
  if (world.rank() != 0)
    delete ::testing::UnitTest::GetInstance()->listeners().Release(
        ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  const int code = RUN_ALL_TESTS();
  moe::finalize_world_comm();
  return code;
}
