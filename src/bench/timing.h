// Timing as the seed does it (spec §9.1), minus the compile: one untimed first call (GEMM primitive
// creation, first touch of buffers), `warmup` untimed calls, then `iters` timed calls, each timed on
// its own with a steady clock so we can report the median, min and max beside the seed's mean.
// `sync` waits for the backend's queued work (a no-op on the CPU): it runs before each clock start
// and inside each timed region, so an asynchronous device is timed for the work it did, not for the
// time it took to enqueue it.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace moe::bench {

struct TimingStats {
  double mean = 0, median = 0, min = 0, max = 0;
  std::vector<double> samples;
};

inline TimingStats summarize(std::vector<double> samples) {
  TimingStats s;
  s.samples = samples;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  const size_t n = samples.size();
  s.mean = sum / double(n);
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

template <typename Fn, typename Sync>
TimingStats time_fn(Fn&& fn, int warmup, int iters, Sync&& sync) {
  fn();
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  samples.reserve(size_t(iters));
  for (int i = 0; i < iters; ++i) {
    sync();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return summarize(std::move(samples));
}

}  // namespace moe::bench
