// The items of a parallel call among its threads (cpu/gemm/work_shares.h): every item runs exactly once
// whatever the team, a thread takes its own share first and in order, and a thread that is done takes the
// items a slower one has not reached.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <utility>
#include <vector>

#include "cpu/gemm/work_shares.h"

namespace moe::gemm_detail {
namespace {

// Which thread ran each item (-1: none; -2: more than one), `threads` shares among a team of `team` (at most
// `threads`), taken one by one (most 0: next) or in runs of up to `most` (next_run).
std::vector<int> runners(int64_t count, int threads, int team, int64_t most) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(count));
  for (auto& r : ran) r = -1;
  WorkShares shares(count, threads);
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num();
    auto run_item = [&](int64_t i) {
      int none = -1;
      if (!ran[size_t(i)].compare_exchange_strong(none, t)) ran[size_t(i)] = -2;
    };
    if (most == 0)
      for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) run_item(i);
    else
      for (WorkShares::Run r = shares.next_run(t, most); r.begin >= 0; r = shares.next_run(t, most))
        for (int64_t i = r.begin; i < r.end; ++i) run_item(i);
  }
  return std::vector<int>(ran.begin(), ran.end());
}

TEST(WorkShares, EveryItemRunsExactlyOnce) {
  for (int64_t count : {0, 1, 2, 3, 7, 64, 1001})
    for (int threads : {1, 2, 3, 4})
      for (int team = 1; team <= threads; ++team)
        for (int64_t most : {0, 1, 3}) {
          const std::vector<int> ran = runners(count, threads, team, most);
          for (int64_t i = 0; i < count; ++i)
            ASSERT_GE(ran[size_t(i)], 0)
                << "item " << i << " of " << count << ", " << threads << " shares, team " << team
                << ", runs of " << most << (ran[size_t(i)] == -1 ? ": never ran" : ": ran twice");
        }
}

// next_run takes up to `most` items of the front at once, the rest of a share when fewer are left, and
// steals as next() does.
TEST(WorkShares, RunsTakeSeveralItemsInOrder) {
  WorkShares shares(10, 2);
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (WorkShares::Run r = shares.next_run(0, 3); r.begin >= 0; r = shares.next_run(0, 3))
    runs.emplace_back(r.begin, r.end);
  // Share [0, 5): [0, 3), [3, 5); then thread 1's back halves, each taken whole: [8, 10), [7, 8), [6, 7), [5,
  // 6).
  const std::vector<std::pair<int64_t, int64_t>> expected{{0, 3}, {3, 5}, {8, 10}, {7, 8}, {6, 7}, {5, 6}};
  EXPECT_EQ(runs, expected);
}

TEST(WorkShares, AThreadTakesItsOwnShareFirstInOrder) {
  WorkShares shares(10, 2);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(shares.next(0), i);
  for (int64_t i = 5; i < 10; ++i) EXPECT_EQ(shares.next(1), i);
  EXPECT_EQ(shares.next(0), -1);
  EXPECT_EQ(shares.next(1), -1);
}

// Thread 1 has not started when thread 0 has run its share: thread 0 then takes the back half of thread 1's
// share, walks it in order, and so on until one item is left, which it takes too.
TEST(WorkShares, ADoneThreadTakesTheBackHalfOfTheLargestShareLeft) {
  WorkShares shares(20, 2);
  std::vector<int64_t> order;
  for (int64_t i = shares.next(0); i >= 0; i = shares.next(0)) order.push_back(i);
  // [10, 20) left: [15, 20) taken; [10, 15) left: [13, 15); then [12, 13), [11, 12), [10, 11).
  const std::vector<int64_t> expected{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 18, 19, 13, 14, 12, 11, 10};
  EXPECT_EQ(order, expected);
  EXPECT_EQ(shares.next(1), -1);
}

TEST(WorkShares, SetSharesAreTakenAsSet) {
  WorkShares shares(3);
  shares.set(0, 0, 4);
  shares.set(1, 4, 4);  // empty: its thread starts by taking another's
  shares.set(2, 4, 6);
  EXPECT_EQ(shares.next(2), 4);
  EXPECT_EQ(shares.next(1), 2);  // the back half of thread 0's [0, 4)
  EXPECT_EQ(shares.next(0), 0);
  EXPECT_EQ(shares.next(2), 5);
  EXPECT_EQ(shares.next(1), 3);
  EXPECT_EQ(shares.next(0), 1);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(shares.next(t), -1);
}

TEST(WorkShares, SharesOfThreadsTheTeamLacksAreTaken) {
  WorkShares shares(9, 3);
  int64_t taken = 0;
  while (shares.next(0) >= 0) ++taken;
  EXPECT_EQ(taken, 9);
}

}  // namespace
}  // namespace moe::gemm_detail
