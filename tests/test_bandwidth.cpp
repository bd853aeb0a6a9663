// The bandwidth probes' kernels (src/bench/probes/bandwidth.h): read_words adds every word of its range
// once whatever the threads and the range's length (the GEMM bench's reference reads the same way),
// write_words writes every word of its range and none beside it, and a probe reports finite, positive
// rates.
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

TEST(Bandwidth, WriteWordsWritesEveryWordOfItsRangeOnAnyThreadCount) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t words : {0, 1, 2, 3, 15, 16, 17, 33, 1000, 4099})
    for (int threads : {1, 2, 3, 7}) {
      const uint64_t value = rng(), guard = ~value;
      // Guard words around the range, which starts 16-byte aligned (the streaming stores' alignment).
      std::vector<uint64_t> a(static_cast<size_t>(words) + 4, guard);
      uint64_t* range = a.data() + (reinterpret_cast<uintptr_t>(a.data()) % 16 == 0 ? 2 : 1);
      write_words(range, words * 8, threads, value);
      for (size_t i = 0; i < a.size(); ++i) {
        const bool inside = &a[i] >= range && &a[i] < range + words;
        ASSERT_EQ(a[i], inside ? value : guard) << words << " words, " << threads << " threads, word " << i;
      }
    }
}

TEST(Bandwidth, AProbeReadsAndWritesAtFinitePositiveRates) {
  const MemoryProbe probe(2, 8.0 * 1024 * 1024);
  for (double gbps : {probe.read_gbps(2), probe.write_gbps(2, false), probe.write_gbps(2, true)}) {
    EXPECT_TRUE(std::isfinite(gbps));
    EXPECT_GT(gbps, 0.0);
  }
}

}  // namespace
}  // namespace moe::bench
