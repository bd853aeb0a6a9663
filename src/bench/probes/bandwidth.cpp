#include "bench/probes/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

namespace moe::bench {
namespace {

constexpr int kRepeats = 5;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t elements(double bytes) {
  return std::max<int64_t>(1 << 20, int64_t(bytes / sizeof(double)));
}

// The best of `repeats` read passes over a[0, n).
double best_read_gbps(const double* a, int64_t n, int threads, int repeats) {
  double best = 0;
  volatile double sink = 0;  // keeps the read kernel's sum alive
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    double sum = 0;
#pragma omp parallel for simd schedule(static) num_threads(threads) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += a[i];
    best = std::max(best, double(n) * sizeof(double) / seconds_since(start) / 1e9);
    sink = sink + sum;
  }
  return best;
}

}  // namespace

double measure_read_gbps(int threads, double bytes, int repeats) {
  const int64_t n = elements(bytes);
  std::unique_ptr<double[]> a(new double[size_t(n)]);  // first touched by the reading threads, below
  double* pa = a.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) pa[i] = 1.0;
  return best_read_gbps(pa, n, threads, repeats);
}

Bandwidth measure_bandwidth(int threads, double bytes_per_array) {
  const int64_t n = elements(bytes_per_array);
  // Not value-initialized: the first touch is the threads' own, below.
  std::unique_ptr<double[]> a(new double[size_t(n)]), b(new double[size_t(n)]), c(new double[size_t(n)]);
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.5;
  }
  Bandwidth bw;
  bw.read_gbps = best_read_gbps(pa, n, threads, kRepeats);
  const double s = 3.0;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    bw.triad_gbps = std::max(bw.triad_gbps, 3.0 * double(n) * sizeof(double) / seconds_since(start) / 1e9);
  }
  return bw;
}

}  // namespace moe::bench
