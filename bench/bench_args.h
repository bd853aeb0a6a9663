// The positional count arguments of the plain-C++ bench tools (bench/int8, bench/passes): each a whole
// decimal integer within its bounds, else one error line and exit 2, as moe-bench's own flags (a garbage
// "x" read as 0 by atoi, or a size whose buffers cannot be had, must not run or crash).
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace moe::bench_args {

// argv[index] (1-based) as an integer in [lo, hi], or `fallback` where the argument is absent. On a bad
// one: prints "<tool>: error: <name> ..." to stderr and returns false.
inline bool count(int argc, char** argv, int index, const char* tool, const char* name, int64_t lo,
                  int64_t hi, int64_t fallback, int64_t& out) {
  if (index >= argc) {
    out = fallback;
    return true;
  }
  const char* text = argv[index];
  const char* end = text + std::strlen(text);
  int64_t value = 0;
  const auto [at, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || at != end || value < lo || value > hi) {
    std::fprintf(stderr, "%s: error: %s must be an integer in [%lld, %lld] (got '%s')\n", tool, name,
                 (long long)lo, (long long)hi, text);
    return false;
  }
  out = value;
  return true;
}

// More positional arguments than the tool takes: one error line.
inline bool at_most(int argc, int most, const char* tool, const char* usage) {
  if (argc - 1 <= most) return true;
  std::fprintf(stderr, "%s: error: %d arguments given, at most %d taken (usage: %s)\n", tool, argc - 1, most,
               usage);
  return false;
}

}  // namespace moe::bench_args
