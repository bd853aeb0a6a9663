// The bandwidth probes' read kernel (src/bench/probes/bandwidth.h): read_words adds every word of its range
// once whatever the threads and the range's length (the GEMM bench's reference reads the same way), and a
// probe reports a finite, positive rate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bench/probes/bandwidth.h"

namespace moe::bench {
namespace {

TEST(Bandwidth, ReadWordsAddsEveryWordOnceOnAnyThreadCount) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Lengths around the 16 sums' stride and the threads' shares: empty, shorter than one stride, ragged
  // tails, and one long enough for every thread.
  for (int64_t words : {0, 1, 15, 16, 17, 31, 33, 255, 1000, 4099}) {
    std::vector<uint64_t> a(static_cast<size_t>(words));
    uint64_t want = 0;
    for (uint64_t& w : a) {
      w = rng();  // any bit pattern: integer sums wrap alike in any order
      want += w;
    }
    for (int threads : {1, 2, 3, 7})
      EXPECT_EQ(read_words(a.data(), words * 8, threads), want)
          << words << " words, " << threads << " threads";
  }
}

TEST(Bandwidth, AProbeReadsAtAFinitePositiveRate) {
  const ReadProbe probe(2, 8.0 * 1024 * 1024);
  const double gbps = probe.read_gbps(2);
  EXPECT_TRUE(std::isfinite(gbps));
  EXPECT_GT(gbps, 0.0);
}

}  // namespace
}  // namespace moe::bench
