// What the plain-C++ GEMM bench tools (bench/int8, bench/gemv) share: a kernel table per variant and
// candidates timed in rounds, every candidate once a round in turn, the best round kept (the 2-core box is
// shared: contention only ever slows a call down).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"

namespace moe::bench_rounds {

// One table per variant, kept for the process: the variant named first, no measuring.
inline GemmKernels& table(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<GemmKernels>> tables;
  std::unique_ptr<GemmKernels>& t = tables[variant];
  if (!t) {
    KernelConfig k;
    k.gemm_variant = variant;
    k.tuning_file = "none";
    t = std::make_unique<GemmKernels>(k);
  }
  return *t;
}

struct Candidate {
  std::string name;
  std::function<void()> run;
  double best = 1e30;  // seconds of its fastest round
};

inline double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each candidate once to warm it (primitives, scratch, pages), then `rounds` timed rounds.
inline void time_rounds(std::vector<Candidate>& candidates, int rounds) {
  for (Candidate& k : candidates) k.run();
  for (int r = 0; r < rounds; ++r)
    for (Candidate& k : candidates) k.best = std::min(k.best, seconds_of(k.run));
}

}  // namespace moe::bench_rounds
