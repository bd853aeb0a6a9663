#include "cpu/gemm/work_shares.h"

#include <algorithm>

#include "moe/status.h"

namespace moe::gemm_detail {

namespace {

uint64_t span(int64_t front, int64_t back) {
  return uint64_t(front) | uint64_t(back) << 32;
}
int64_t front_of(uint64_t s) {
  return int64_t(s & 0xffffffffu);
}
int64_t back_of(uint64_t s) {
  return int64_t(s >> 32);
}

}  // namespace

WorkShares::WorkShares(int threads) : threads_(threads), shares_(new Share[size_t(std::max(threads, 1))]) {
  MOE_CHECK(threads > 0, "work shares of a team");
  for (int t = 0; t < threads; ++t) shares_[size_t(t)].span = 0;
}

WorkShares::WorkShares(int64_t count, int threads) : WorkShares(threads) {
  for (int t = 0; t < threads; ++t) set(t, count * t / threads, count * (t + 1) / threads);
}

WorkShares::WorkShares(WorkShares&&) noexcept = default;
WorkShares::~WorkShares() = default;

void WorkShares::set(int t, int64_t begin, int64_t end) {
  MOE_CHECK(t >= 0 && t < threads_ && begin >= 0 && begin <= end && end < (int64_t(1) << 31),
            "a work share of 0-2^31 items");
  __atomic_store_n(&shares_[size_t(t)].span, span(begin, end), __ATOMIC_RELEASE);  // tn sets them in a team
}

bool WorkShares::take_front(int t, int64_t most, Run& run) {
  uint64_t& mine = shares_[size_t(t)].span;
  uint64_t s = __atomic_load_n(&mine, __ATOMIC_ACQUIRE);
  while (front_of(s) < back_of(s)) {
    const int64_t taken = std::min(most, back_of(s) - front_of(s));
    if (__atomic_compare_exchange_n(&mine, &s, s + uint64_t(taken), true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      run = {front_of(s), front_of(s) + taken};
      return true;
    }
  }
  return false;
}

// The back half (at least one item) of the largest share left becomes thread t's (its own is empty, so no
// other thread changes it meanwhile: they take only from shares with items left). False: no items left.
bool WorkShares::take_back_half(int t) {
  for (;;) {
    int victim = -1;
    uint64_t seen = 0;
    int64_t most = 0;
    for (int v = 0; v < threads_; ++v) {
      const uint64_t s = __atomic_load_n(&shares_[size_t(v)].span, __ATOMIC_ACQUIRE);
      if (back_of(s) - front_of(s) > most) {
        most = back_of(s) - front_of(s);
        victim = v;
        seen = s;
      }
    }
    if (victim < 0) return false;
    const int64_t taken = most > 1 ? most / 2 : 1, back = back_of(seen);
    if (__atomic_compare_exchange_n(&shares_[size_t(victim)].span, &seen, span(front_of(seen), back - taken),
                                    false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&shares_[size_t(t)].span, span(back - taken, back), __ATOMIC_RELEASE);
      return true;
    }
  }
}

int64_t WorkShares::next(int t) {
  return next_run(t, 1).begin;
}

WorkShares::Run WorkShares::next_run(int t, int64_t most) {
  MOE_CHECK(t >= 0 && t < threads_ && most > 0, "a thread of the work shares' team takes items");
  Run run;
  while (!take_front(t, most, run))
    if (!take_back_half(t)) return {-1, -1};
  return run;
}

}  // namespace moe::gemm_detail
