#include "bench/research/progress.h"

#include <fmt/format.h>

#include <cstdio>

namespace moe::bench {

void Progress::done(const std::string& what) {
  ++done_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!always_ && (total_ < 2 || elapsed <= 3.0)) return;
  const size_t left = total_ - done_ - skipped_;
  fmt::print(stderr, "moe-bench: run {}/{} done ({}){}, elapsed {:.1f}s, ETA {:.1f}s\n", done_ + skipped_,
             total_, what, skipped_ ? fmt::format(", {} skipped (in the store)", skipped_) : "", elapsed,
             elapsed / double(done_) * double(left));
}

}  // namespace moe::bench
