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

}  // namespace

Bandwidth measure_bandwidth(int threads, double bytes_per_array) {
  const int64_t n = std::max<int64_t>(1 << 20, int64_t(bytes_per_array / sizeof(double)));
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
  volatile double sink = 0;  // keeps the read kernel's sum alive
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    double sum = 0;
#pragma omp parallel for simd schedule(static) num_threads(threads) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += pa[i];
    bw.read_gbps = std::max(bw.read_gbps, double(n) * sizeof(double) / seconds_since(start) / 1e9);
    sink = sink + sum;
  }
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
