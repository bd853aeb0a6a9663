// Test helpers: every random test draws a fresh seed (or MOE_TEST_SEED from the environment to replay
// a failure) and prints it, so a failing case can be reproduced exactly.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace moe::testing {

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("MOE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::mt19937_64 gen(std::random_device{}() ^
                             uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  return gen() % 1000000007ull;
}

// Draws a seed, prints it and records it in the test's XML properties.
inline uint64_t test_seed() {
  uint64_t seed = fresh_seed();
  std::printf("[ seed     ] MOE_TEST_SEED=%llu\n", (unsigned long long)seed);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace moe::testing
