// Timing as the seed does it (spec §9.1), minus the compile: one untimed first call (GEMM primitive
// creation, first touch of buffers), `warmup` untimed calls, then `iters` timed calls, each timed on
// its own with a steady clock so we can report the median, min, max and stddev beside the seed's mean.
// `repeats` > 1 runs the warmup + iters block that many times (separate timed blocks: a slow drift or a
// noisy neighbour shows up as spread between blocks); the statistics are over every timed call.
// `sync` waits for the backend's queued work (a no-op on the CPU): it runs before each clock start
// and inside each timed region, so an asynchronous device is timed for the work it did, not for the
// time it took to enqueue it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace moe::bench {

struct TimingStats {
  double mean = 0, median = 0, min = 0, max = 0;
  double stddev = 0;            // sample standard deviation (n - 1); 0 for a single call
  std::vector<double> samples;  // every timed call, block after block
  int blocks = 1;               // samples are `blocks` blocks of samples.size() / blocks calls
};

inline TimingStats summarize(std::vector<double> samples, int blocks = 1) {
  TimingStats s;
  s.samples = samples;
  s.blocks = blocks;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  const size_t n = samples.size();
  s.mean = sum / double(n);
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  double squares = 0;
  for (double v : samples) squares += (v - s.mean) * (v - s.mean);
  s.stddev = n > 1 ? std::sqrt(squares / double(n - 1)) : 0.0;
  return s;
}

// `align` runs before each clock start, outside the timed region: over several ranks a barrier, so
// every rank's call i starts together and the run's call time is the slowest rank's (max_over_ranks).
template <typename Fn, typename Sync, typename Align>
TimingStats time_fn_aligned(Fn&& fn, int warmup, int iters, Sync&& sync, int repeats, Align&& align) {
  fn();
  std::vector<double> samples;
  samples.reserve(size_t(iters) * size_t(repeats));
  for (int block = 0; block < repeats; ++block) {
    for (int i = 0; i < warmup; ++i) fn();
    for (int i = 0; i < iters; ++i) {
      sync();
      align();
      auto t0 = std::chrono::steady_clock::now();
      fn();
      sync();
      samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return summarize(std::move(samples), repeats);
}

template <typename Fn, typename Sync>
TimingStats time_fn(Fn&& fn, int warmup, int iters, Sync&& sync, int repeats = 1) {
  return time_fn_aligned(fn, warmup, iters, sync, repeats, [] {});
}

}  // namespace moe::bench
