// The collectives of moe/comm.h on any multi-rank Comm, each rank's side of one case: called by every
// rank of a world of thread ranks (test_comm.cpp) and of an MPI job (tests/mpi/test_mpi.cpp), on
// rank-stamped payloads ((rank + 1) * 1000 + index: a misplaced element shows where it came from).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "moe/comm.h"
#include "moe/parallel.h"

namespace moe::comm_cases {

inline Tensor stamped(Dtype dt, int64_t n, int rank) {
  Tensor t(dt, {n});
  for (int64_t i = 0; i < n; ++i) t.set(i, double((rank + 1) * 1000 + i));
  return t;
}

// What a sum over R ranks must read, given the exact sum `want` of the stamps as dt holds them: want
// rounded once to dt; for bf16 and f16 over more than two ranks, where a comm may round its partial sums
// too (moe/comm.h), `got` itself where it is within R - 1 roundings (half an ulp each) of want.
inline double bf16_or_f32_sum(Dtype dt, double want, int R, double got) {
  Tensor rounded(dt, {1});
  rounded.set(0, want);
  const int half_ulp = dt == Dtype::bf16 ? -8 : -11;
  if (dt != Dtype::f32 && R > 2 && std::abs(got - want) <= (R - 1) * std::ldexp(std::abs(want), half_ulp))
    return got;
  return rounded.get(0);
}

inline void all_reduce_sums_rank_stamped_payloads(Comm& comm) {
  const int R = comm.size();
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
    Tensor t = stamped(dt, 37, comm.rank());
    ASSERT_TRUE(comm.all_reduce_sum(t).is_ok());
    for (int64_t i = 0; i < 37; ++i) {
      double want = 0;
      for (int r = 0; r < R; ++r) want += stamped(dt, 37, r).get(i);  // the stamps as the dtype holds them
      EXPECT_EQ(t.get(i), bf16_or_f32_sum(dt, want, R, t.get(i))) << dtype_name(dt) << " i=" << i;
    }
  }
}

inline void all_gather_and_reduce_scatter_place_each_ranks_slice(Comm& comm) {
  const int R = comm.size();
  const int64_t n = 5;
  const Tensor send = stamped(Dtype::f32, n, comm.rank());
  Tensor gathered(Dtype::f32, {R * n});
  ASSERT_TRUE(comm.all_gather(gathered, send).is_ok());
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(gathered.get(r * n + i), double((r + 1) * 1000 + i));
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
    const Tensor big = stamped(dt, R * n, comm.rank());
    Tensor mine(dt, {n});
    ASSERT_TRUE(comm.reduce_scatter_sum(mine, big).is_ok());
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < R; ++r) want += stamped(dt, R * n, r).get(comm.rank() * n + i);
      EXPECT_EQ(mine.get(i), bf16_or_f32_sum(dt, want, R, mine.get(i))) << dtype_name(dt);
    }
  }
}

// Rank s sends (s + d) % 3 elements to rank d (some zero), stamped with the sender and receiver.
inline void all_to_all_v_delivers_each_row_from_its_sender(Comm& comm) {
  const int R = comm.size(), me = comm.rank();
  std::vector<int64_t> sc(static_cast<size_t>(R)), rc(static_cast<size_t>(R));
  for (int p = 0; p < R; ++p) {
    sc[size_t(p)] = (me + p) % 3;
    rc[size_t(p)] = (p + me) % 3;
  }
  Tensor send(Dtype::bf16, {3 * R}), recv(Dtype::bf16, {3 * R});
  int64_t at = 0;
  for (int p = 0; p < R; ++p)
    for (int64_t i = 0; i < sc[size_t(p)]; ++i) send.set(at++, double(me * 16 + p * 4 + i));
  ASSERT_TRUE(comm.all_to_all_v(recv, rc, send, sc).is_ok());
  at = 0;
  for (int src = 0; src < R; ++src)
    for (int64_t i = 0; i < rc[size_t(src)]; ++i) EXPECT_EQ(recv.get(at++), double(src * 16 + me * 4 + i));
}

// A 2 x (R/2) mesh: one split per axis, and a sum over one axis.
inline void split_makes_data_by_expert_meshes(Comm& world) {
  const int R = world.size();
  if (R % 2 != 0) GTEST_SKIP() << "a 2 x (R/2) mesh needs an even R";
  const int X = 2, data_index = world.rank() / X, expert_index = world.rank() % X;
  std::unique_ptr<Comm> expert = world.split(data_index, expert_index);  // ranks of one data replica
  std::unique_ptr<Comm> data = world.split(expert_index, data_index);    // ranks of one expert shard
  EXPECT_EQ(expert->size(), X);
  EXPECT_EQ(expert->rank(), expert_index);
  EXPECT_EQ(data->size(), R / X);
  EXPECT_EQ(data->rank(), data_index);
  Tensor t(Dtype::f32, {1});
  t.set(0, world.rank());
  ASSERT_TRUE(data->all_reduce_sum(t).is_ok());
  double want = 0;
  for (int d = 0; d < R / X; ++d) want += d * X + expert_index;
  EXPECT_EQ(t.get(0), want);
}

// gather_text (moe/parallel.h): rank r's text, r + 1 lines long (rank 1's empty: a rank may have
// nothing to say), arrives on rank 0 in rank order; the others get nothing.
inline void gather_text_brings_each_ranks_text_to_rank_zero(Comm& comm) {
  auto text_of = [](int r) {
    std::string t;
    for (int i = 0; r != 1 && i <= r; ++i)
      t += "rank " + std::to_string(r) + " line " + std::to_string(i) + "\n";
    return t;
  };
  std::vector<std::string> all;
  ASSERT_TRUE(gather_text(comm, text_of(comm.rank()), all).is_ok());
  if (comm.rank() != 0) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(int(all.size()), comm.size());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[size_t(r)], text_of(r)) << r;
}

}  // namespace moe::comm_cases
