#include "bench/probes/bandwidth.h"

#include <emmintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "cpu/gemm/tuning.h"

namespace moe::bench {
namespace {

constexpr int kRepeats = 5;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t elements(double bytes) {
  return std::max<int64_t>(1 << 20, int64_t(bytes / sizeof(double)));
}

// n doubles on 2 MiB pages where the system gives them, as the tensors' storage asks (moe/tensor.h's host
// allocator): a read of 4 KiB pages ran 29.5 against 34.5 GB/s on them (2-core Zen 4; the hardware's
// prefetchers stop at a page's end), so a probe on small pages understated what a GEMM reading its weights
// streams. Not value-initialized: the first touch is the reading threads'.
struct HugeArray {
  static constexpr size_t kHugePage = size_t(2) << 20;
  explicit HugeArray(int64_t n) {
    const size_t bytes = (size_t(n) * sizeof(double) + kHugePage - 1) / kHugePage * kHugePage;
    data.reset(static_cast<double*>(std::aligned_alloc(kHugePage, bytes)));
    if (!data) throw std::bad_alloc();
    madvise(data.get(), bytes, MADV_HUGEPAGE);  // a no-op where huge pages are off
  }
  struct Free {
    void operator()(double* p) const { std::free(p); }
  };
  std::unique_ptr<double, Free> data;
};

// The best of `repeats` read passes over a[0, n).
double best_read_gbps(const double* a, int64_t n, int threads, int repeats) {
  double best = 0;
  volatile uint64_t sink = 0;  // keeps the read kernel's sum alive
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t sum = read_words(a, n * int64_t(sizeof(double)), threads);
    best = std::max(best, double(n) * sizeof(double) / seconds_since(start) / 1e9);
    sink = sink + sum;
  }
  return best;
}

// The best of `repeats` streaming write passes over a[0, n) of zeros or (zeros false) of 2.0.
double best_write_gbps(double* a, int64_t n, int threads, int repeats, bool zeros) {
  const uint64_t value = zeros ? 0 : std::bit_cast<uint64_t>(2.0);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    write_words(a, n * int64_t(sizeof(double)), threads, value);
    best = std::max(best, double(n) * sizeof(double) / seconds_since(start) / 1e9);
  }
  return best;
}

}  // namespace

void write_words(void* p, int64_t bytes, int threads, uint64_t value) {
  auto* words = static_cast<uint64_t*>(p);
  const int64_t n = bytes / 8;
  const __m128i pair = _mm_set1_epi64x(int64_t(value));
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * t / team / 2 * 2;
    const int64_t end = t + 1 == team ? n : n * (t + 1) / team / 2 * 2;
    int64_t i = begin;
    for (; i + 2 <= end; i += 2) _mm_stream_si128(reinterpret_cast<__m128i*>(words + i), pair);
    for (; i < end; ++i) words[i] = value;
    _mm_sfence();  // the streamed lines reach memory before the pass's time is taken
  }
}

uint64_t read_words(const void* p, int64_t bytes, int threads) {
  constexpr int64_t kChains = 16;
  const auto* words = static_cast<const uint64_t*>(p);
  const int64_t n = bytes / 8;
  uint64_t sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * t / team / kChains * kChains;
    const int64_t end = t + 1 == team ? n : n * (t + 1) / team / kChains * kChains;
    uint64_t chains[kChains] = {};
    int64_t i = begin;
    for (; i + kChains <= end; i += kChains)
      for (int64_t j = 0; j < kChains; ++j) chains[j] += words[i + j];
    for (; i < end; ++i) chains[0] += words[i];
    for (uint64_t c : chains) sum += c;
  }
  return sum;
}

double measure_read_gbps(int threads, double bytes, int repeats) {
  return MemoryProbe(threads, bytes).read_gbps(repeats);
}

double bytes_beside_calls() {
  return 4.0 * double(last_level_cache_bytes());
}

struct MemoryProbe::Array : HugeArray {
  using HugeArray::HugeArray;
};

MemoryProbe::MemoryProbe(int threads, double bytes)
    : threads_(threads), elements_(elements(bytes)), array_(std::make_unique<Array>(elements_)) {
  double* a = array_->data.get();  // first touched by the reading threads
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < elements_; ++i) a[i] = 1.0;
}

MemoryProbe::~MemoryProbe() = default;

double MemoryProbe::read_gbps(int repeats) const {
  return best_read_gbps(array_->data.get(), elements_, threads_, repeats);
}

double MemoryProbe::write_gbps(int repeats, bool zeros) const {
  return best_write_gbps(array_->data.get(), elements_, threads_, repeats, zeros);
}

Bandwidth measure_bandwidth(int threads, double bytes_per_array) {
  const int64_t n = elements(bytes_per_array);
  const HugeArray a(n), b(n), c(n);  // first touched by the threads, below
  double* pa = a.data.get();
  double* pb = b.data.get();
  double* pc = c.data.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.5;
  }
  Bandwidth bw;
  bw.read_gbps = best_read_gbps(pa, n, threads, kRepeats);
  bw.write_gbps = best_write_gbps(pb, n, threads, kRepeats, false);      // 2.0, as it held
  bw.zero_write_gbps = best_write_gbps(pa, n, threads, kRepeats, true);  // the triad's output
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
