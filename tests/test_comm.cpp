// The comms: every collective of moe/comm.h on rank-stamped payloads (DeepEP's `ones * rank`, here
// (rank + 1) * 1000 + index so a misplaced element shows where it came from), f32 and bf16, in place
// and out of place, the errors a caller can cause, and split() into a data x expert mesh: the local
// comm, and 1-4 ranks as threads (make_thread_comms). tests/mpi/ runs the same under mpirun.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/exchanges.h"
#include "comm_cases.h"
#include "moe/comm.h"

namespace moe {
namespace {

using comm_cases::stamped;

TEST(LocalComm, IsRankZeroOfOne) {
  auto comm = make_local_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_TRUE(comm->barrier().is_ok());
}

TEST(LocalComm, AllReduceSumOfOneRankKeepsTheValues) {
  auto comm = make_local_comm();
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    Tensor t = stamped(dt, 37, comm->rank());
    const std::vector<double> before = t.to_f64();
    ASSERT_TRUE(comm->all_reduce_sum(t).is_ok()) << dtype_name(dt);
    EXPECT_EQ(t.to_f64(), before) << dtype_name(dt);
  }
  Tensor ints(Dtype::s32, {4});
  const Status s = comm->all_reduce_sum(ints);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
}

TEST(LocalComm, AllGatherAndReduceScatterCopy) {
  auto comm = make_local_comm();
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    const Tensor send = stamped(dt, 21, 0);
    Tensor gathered(dt, {21}), scattered(dt, {21});
    ASSERT_TRUE(comm->all_gather(gathered, send).is_ok());
    EXPECT_EQ(gathered.to_f64(), send.to_f64());
    ASSERT_TRUE(comm->reduce_scatter_sum(scattered, send).is_ok());
    EXPECT_EQ(scattered.to_f64(), send.to_f64());
  }
  Tensor too_small(Dtype::f32, {20});
  EXPECT_FALSE(comm->all_gather(too_small, stamped(Dtype::f32, 21, 0)).is_ok());
  EXPECT_FALSE(comm->reduce_scatter_sum(too_small, stamped(Dtype::f32, 21, 0)).is_ok());
  Tensor wrong_dtype(Dtype::bf16, {21});
  EXPECT_FALSE(comm->all_gather(wrong_dtype, stamped(Dtype::f32, 21, 0)).is_ok());
}

TEST(LocalComm, AllToAllVMovesTheCountedPrefix) {
  auto comm = make_local_comm();
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    const Tensor send = stamped(dt, 50, 0);
    const Tensor stale = stamped(dt, 64, 7);  // content past the counted prefix must survive
    Tensor recv = stale.clone();
    ASSERT_TRUE(comm->all_to_all_v(recv, {40}, send, {40}).is_ok());
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(recv.get(i), i < 40 ? send.get(i) : stale.get(i)) << i;
    Tensor in_place = stamped(dt, 30, 0);
    ASSERT_TRUE(comm->all_to_all_v(in_place, {30}, in_place, {30}).is_ok());
    EXPECT_EQ(in_place.to_f64(), stamped(dt, 30, 0).to_f64());
  }
  Tensor buf(Dtype::f32, {8});
  EXPECT_FALSE(comm->all_to_all_v(buf, {4}, buf, {5}).is_ok());        // sends 5 to itself, expects 4
  EXPECT_FALSE(comm->all_to_all_v(buf, {4, 4}, buf, {4, 4}).is_ok());  // two peers on one rank
  EXPECT_FALSE(comm->all_to_all_v(buf, {9}, buf, {9}).is_ok());        // more than the buffers hold
}

TEST(LocalComm, SplitIntoADataByExpertMesh) {
  auto world = make_local_comm();
  auto data = world->split(/*color=*/0, world->rank());
  auto expert = world->split(/*color=*/world->rank(), 0);
  ASSERT_TRUE(data && expert);
  EXPECT_EQ(data->size() * expert->size(), world->size());
  EXPECT_EQ(data->rank(), 0);
  EXPECT_EQ(expert->rank(), 0);
  Tensor t = stamped(Dtype::f32, 5, 0);
  EXPECT_TRUE(expert->split(0, 0)->all_reduce_sum(t).is_ok());
}

// ------------------------------------------------------------------------------ thread ranks

// Runs fn(comm) on each of `ranks` thread ranks of one world and waits for them.
template <typename Fn>
void on_thread_ranks(int ranks, Fn&& fn) {
  std::vector<std::unique_ptr<Comm>> comms = make_thread_comms(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { fn(*comms[size_t(r)]); });
  for (std::thread& t : threads) t.join();
}

class ThreadComms : public ::testing::TestWithParam<int> {};

TEST_P(ThreadComms, AllReduceSumsRankStampedPayloads) {
  on_thread_ranks(GetParam(), comm_cases::all_reduce_sums_rank_stamped_payloads);
}
TEST_P(ThreadComms, AllGatherAndReduceScatterPlaceEachRanksSlice) {
  on_thread_ranks(GetParam(), comm_cases::all_gather_and_reduce_scatter_place_each_ranks_slice);
}
TEST_P(ThreadComms, AllToAllVDeliversEachRowFromItsSender) {
  on_thread_ranks(GetParam(), comm_cases::all_to_all_v_delivers_each_row_from_its_sender);
}
TEST_P(ThreadComms, GatherTextBringsEachRanksTextToRankZero) {
  on_thread_ranks(GetParam(), comm_cases::gather_text_brings_each_ranks_text_to_rank_zero);
}
TEST_P(ThreadComms, SplitMakesDataByExpertMeshes) {
  if (GetParam() % 2 != 0) GTEST_SKIP() << "a 2 x (R/2) mesh needs an even R";
  on_thread_ranks(GetParam(), comm_cases::split_makes_data_by_expert_meshes);
}

// An argument error on one rank is returned on every rank, so none waits for it.
TEST_P(ThreadComms, AnErrorOnOneRankIsEveryRanksError) {
  const int R = GetParam();
  on_thread_ranks(R, [&](Comm& comm) {
    Tensor t(comm.rank() == R - 1 ? Dtype::s32 : Dtype::f32, {4});
    const Status s = comm.all_reduce_sum(t);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
    // Counts that do not match between ranks: an error everywhere.
    std::vector<int64_t> sc(size_t(R), 1), rc(size_t(R), 1);
    if (comm.rank() == 0) rc[size_t(R - 1)] = 2;
    Tensor buf(Dtype::f32, {2 * R});
    EXPECT_FALSE(comm.all_to_all_v(buf, rc, buf, sc).is_ok());
    EXPECT_TRUE(comm.barrier().is_ok());  // and the world goes on
  });
}

// A collective's transfer time is its last arrival's time in it: each counts as the least time any
// rank of its own comm spent there (a 2 x 2 mesh: one world collective, then two on each pair), and the
// rest of a rank's time is its wait for a later rank.
TEST(CommTransfer, EachCollectiveCountsAsItsCommsLastArrival) {
  constexpr int kRanks = 4;
  constexpr auto kLate = std::chrono::milliseconds(200);
  std::vector<CommMeter> meters(kRanks);
  std::vector<double> transfer(kRanks, -1);
  on_thread_ranks(kRanks, [&](Comm& world) {
    const int r = world.rank();
    std::unique_ptr<Comm> pair = world.split(r / 2, r);
    CommMeter& meter = meters[size_t(r)];
    Tensor t = stamped(Dtype::f32, 16, r);
    auto reduce = [&](Comm& comm) { EXPECT_TRUE(metered_all_reduce(meter, comm, t).is_ok()); };
    if (r == 3) std::this_thread::sleep_for(kLate);  // every other rank waits for it
    reduce(world);
    reduce(*pair);
    if (r == 0) std::this_thread::sleep_for(kLate);  // rank 1 waits for it; ranks 2 and 3 do not
    reduce(*pair);
    EXPECT_TRUE(measure_comm_transfer(meter, transfer[size_t(r)]).is_ok());
  });
  auto least = [&](size_t i, std::vector<int> ranks) {
    double s = meters[size_t(ranks[0])].log.at(i).seconds;
    for (int q : ranks) s = std::min(s, meters[size_t(q)].log.at(i).seconds);
    return s;
  };
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(meters[size_t(r)].log.size(), 3u) << r;
    const std::vector<int> pair = {r / 2 * 2, r / 2 * 2 + 1};
    EXPECT_DOUBLE_EQ(transfer[size_t(r)], least(0, {0, 1, 2, 3}) + least(1, pair) + least(2, pair)) << r;
    EXPECT_LE(transfer[size_t(r)], meters[size_t(r)].seconds) << r;
  }
  const double late = std::chrono::duration<double>(kLate).count();
  EXPECT_GT(meters[1].seconds - transfer[1], late / 2);  // it waited at the world's and at its pair's
  EXPECT_GT(meters[0].seconds - transfer[0], late / 2);  // it waited for rank 3 at the world's
  EXPECT_LT(meters[3].log[0].seconds, late / 2);         // the late rank did not wait
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadComms, ::testing::Values(1, 2, 3, 4), [](const auto& info) {
  return std::string("R").append(std::to_string(info.param));
});

}  // namespace
}  // namespace moe
