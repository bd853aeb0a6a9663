// ThreadComm: the ranks of one world as threads of this process (moe/comm.h). Each collective is
//   post (this rank's buffers and counts) -> barrier -> agree on errors -> read the other ranks' posted
//   buffers into a private result -> barrier -> write the result into this rank's receive buffer,
// so any aliasing of send and receive is safe, and an argument error on any rank is returned on every
// rank (none waits for a rank that gave up). Host tensors only.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include "comm/comm_checks.h"
#include "moe/comm.h"

namespace moe {
namespace {

using namespace comm_detail;

// What a rank brings to the collective in progress.
struct Post {
  Status status;
  const Tensor* send = nullptr;
  const std::vector<int64_t>* send_counts = nullptr;
  const std::vector<int64_t>* recv_counts = nullptr;
  int color = 0, key = 0;
};

struct Group;

// One split's result, published by the color's lowest rank.
struct SplitResult {
  std::shared_ptr<Group> group;
};

struct Group {
  explicit Group(int n) : size(n), posts(size_t(n)), splits(size_t(n)) {}
  const int size;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Post> posts;
  std::vector<SplitResult> splits;

  void wait_all() {
    std::unique_lock<std::mutex> lock(mutex);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const bool met = cv.wait_for(lock, std::chrono::seconds(120), [&] { return generation != gen; });
    MOE_CHECK(met, "a thread rank waited 120 s for the others at a collective (a rank stopped calling)");
  }
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  const char* name() const override { return "threads"; }

  Status all_reduce_sum(Tensor& data) override {
    Post p{check_reducible("all_reduce_sum", data)};
    p.send = &data;
    return collective(p, [&]() -> Status {
      MOE_RETURN_IF_ERROR(same_sizes("all_reduce_sum"));
      std::vector<float> sum(size_t(data.numel()), 0.0f);
      for (const Post& q : group_->posts) {
        const std::vector<float> v = to_f32(*q.send, 0, data.numel());
        for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
      }
      result_ = [this, &data, sum = std::move(sum)] { store_f32(data, 0, sum.data(), data.numel()); };
      return Status::ok();
    });
  }

  Status all_gather(Tensor& recv, const Tensor& send) override {
    Post p{check_gather(recv, send, size())};
    p.send = &send;
    return collective(p, [&]() -> Status {
      MOE_RETURN_IF_ERROR(same_sizes("all_gather"));
      Tensor staged(send.dtype(), {recv.numel()});
      const size_t bytes = send.bytes();
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<char*>(staged.raw()) + size_t(r) * bytes,
                    group_->posts[size_t(r)].send->raw(), bytes);
      result_ = [&recv, staged] { recv.copy_from(staged); };
      return Status::ok();
    });
  }

  Status reduce_scatter_sum(Tensor& recv, const Tensor& send) override {
    Post p{check_scatter(recv, send, size())};
    p.send = &send;
    return collective(p, [&]() -> Status {
      const int64_t n = recv.numel();
      MOE_RETURN_IF_ERROR(same_sizes("reduce_scatter_sum"));
      std::vector<float> sum(size_t(n), 0.0f);
      for (const Post& q : group_->posts) {
        const std::vector<float> v = to_f32(*q.send, int64_t(rank_) * n, n);
        for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
      }
      result_ = [&recv, n, sum = std::move(sum)] { store_f32(recv, 0, sum.data(), n); };
      return Status::ok();
    });
  }

  Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                      const std::vector<int64_t>& send_counts) override {
    Post p{check_counts(recv_counts, recv, send_counts, send, size())};
    p.send = &send;
    p.send_counts = &send_counts;
    p.recv_counts = &recv_counts;
    return collective(p, [&]() -> Status {
      const size_t es = dtype_size(send.dtype());
      const std::vector<int64_t> recv_off = prefix_offsets(recv_counts);
      Tensor staged(recv.dtype(), {recv_off.back()});
      // Every rank checks every pair, so all agree.
      for (int src = 0; src < size(); ++src)
        for (int dst = 0; dst < size(); ++dst) {
          const int64_t n = (*group_->posts[size_t(src)].send_counts)[size_t(dst)];
          const int64_t want = (*group_->posts[size_t(dst)].recv_counts)[size_t(src)];
          if (n != want)
            return Status::error(fmt::format(
                "all_to_all_v: rank {} sends {} elements to rank {}, which expects {}", src, n, dst, want));
        }
      for (int src = 0; src < size(); ++src) {
        const Post& q = group_->posts[size_t(src)];
        const int64_t n = (*q.send_counts)[size_t(rank_)];
        const int64_t src_off = prefix_offsets(*q.send_counts)[size_t(rank_)];
        std::memcpy(static_cast<char*>(staged.raw()) + size_t(recv_off[size_t(src)]) * es,
                    static_cast<const char*>(q.send->raw()) + size_t(src_off) * es, size_t(n) * es);
      }
      result_ = [&recv, staged] { recv.copy_from(staged); };
      return Status::ok();
    });
  }

  Status barrier() override {
    return collective(Post{}, [] { return Status::ok(); });
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    Post p;
    p.color = color;
    p.key = key;
    group_->posts[size_t(rank_)] = p;
    group_->wait_all();
    // Members of this rank's color, ordered by (key, rank); the first publishes the new group.
    std::vector<std::pair<int, int>> members;
    for (int r = 0; r < size(); ++r)
      if (group_->posts[size_t(r)].color == color) members.emplace_back(group_->posts[size_t(r)].key, r);
    std::sort(members.begin(), members.end());
    int leader = size(), new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      leader = std::min(leader, members[i].second);
      if (members[i].second == rank_) new_rank = int(i);
    }
    if (leader == rank_) group_->splits[size_t(rank_)].group = std::make_shared<Group>(int(members.size()));
    group_->wait_all();
    std::shared_ptr<Group> g = group_->splits[size_t(leader)].group;
    group_->wait_all();
    if (leader == rank_) group_->splits[size_t(rank_)].group.reset();
    return std::make_unique<ThreadComm>(std::move(g), new_rank);
  }

  void abort(int code) override {
    MOE_CHECK(false, fmt::format("thread rank {} aborted the world with code {}", rank_, code));
  }

 private:
  // Every rank's send holds as many elements as rank 0's (checked alike on every rank).
  Status same_sizes(const char* op) const {
    const int64_t n = group_->posts[0].send->numel();
    for (int r = 1; r < size(); ++r)
      if (group_->posts[size_t(r)].send->numel() != n)
        return Status::error(fmt::format("{}: rank 0 sends {} elements, rank {} sends {}", op, n, r,
                                         group_->posts[size_t(r)].send->numel()));
    return Status::ok();
  }

  // Posts, meets the others, agrees on errors, runs `gather` (which may set result_), meets again and
  // commits the result.
  template <typename Gather>
  Status collective(Post post, Gather&& gather) {
    group_->posts[size_t(rank_)] = post;
    group_->wait_all();
    Status s;
    for (int r = 0; r < size() && s; ++r)
      if (const Status& q = group_->posts[size_t(r)].status; !q)
        s = r == rank_ ? q : Status::error(fmt::format("rank {}: {}", r, q.message()));
    if (s) s = gather();
    group_->wait_all();
    if (s && result_) result_();
    result_ = nullptr;
    return s;
  }

  std::shared_ptr<Group> group_;
  int rank_;
  std::function<void()> result_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_thread_comms(int ranks) {
  MOE_CHECK(ranks >= 1, "make_thread_comms: at least one rank");
  auto group = std::make_shared<Group>(ranks);
  std::vector<std::unique_ptr<Comm>> comms;
  for (int r = 0; r < ranks; ++r) comms.push_back(std::make_unique<ThreadComm>(group, r));
  return comms;
}

}  // namespace moe
