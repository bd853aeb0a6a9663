// Counter-based random numbers: value i of stream `key` is a pure function of (key, i), so tensors
// fill in parallel, in any order, with identical results on any thread count or machine.
// Generator: SplitMix64 finalizer applied to key ^ (i * golden-ratio odd constant) (a keyed hash,
// statistically strong enough for synthetic benchmarks; not cryptographic). Uniforms use the top 53
// bits; normals use Box-Muller on two uniforms drawn from counters 2i and 2i+1.
// Bit-parity with JAX's threefry is not a goal (docs/design.md).
#pragma once

#include <cmath>
#include <cstdint>

namespace moe {

inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A child key for a named sub-stream (e.g. derive_key(seed, kStreamX)).
inline uint64_t derive_key(uint64_t key, uint64_t stream) {
  return mix64(mix64(key) ^ mix64(stream + 0x51ed27ull));
}

inline uint64_t random_bits(uint64_t key, uint64_t counter) {
  return mix64(key ^ (counter * 0xd1b54a32d192ed03ull));
}

// Uniform in [0, 1).
inline double random_uniform(uint64_t key, uint64_t counter) {
  return double(random_bits(key, counter) >> 11) * (1.0 / 9007199254740992.0);
}

// The largest |random_normal| can return: sqrt(-2 ln(2^-53)) = 8.5717 (1 - u1 >= 2^-53).
constexpr double kMaxAbsNormal = 8.572;

// Standard normal N(0, 1).
inline double random_normal(uint64_t key, uint64_t counter) {
  double u1 = random_uniform(key, 2 * counter);
  double u2 = random_uniform(key, 2 * counter + 1);
  double r = std::sqrt(-2.0 * std::log(1.0 - u1));  // 1-u1 in (0, 1]: log never sees 0
  return r * std::cos(6.283185307179586 * u2);
}

// Stream ids under the master seed (spec §2.1 splits one key five ways; the shared expert gets
// streams of its own instead of reusing the routed keys).
enum RngStream : uint64_t {
  kStreamX = 0,
  kStreamW1 = 1,
  kStreamW2 = 2,
  kStreamW3 = 3,
  kStreamRoute = 4,
  kStreamSharedW1 = 5,
  kStreamSharedW2 = 6,
  kStreamSharedW3 = 7,
  kStreamNull = 8,
  kStreamCheck = 9,  // --check's rounding-sized perturbations (conditioned_check.h)
};

}  // namespace moe
