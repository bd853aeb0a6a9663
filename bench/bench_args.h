// The positional count arguments of the plain-C++ bench tools (bench/int8, bench/passes): each an integer
// within its bounds (moe/parse.h's parse_int, as moe-bench's own flags), else one error line and exit 2 (a
// garbage "x" read as 0 by atoi, or a size whose buffers cannot be had, must not run or crash).
#pragma once

#include <cstdint>
#include <cstdio>

#include "moe/parse.h"
#include "moe/status.h"

namespace moe::bench_args {

// argv[index] (1-based) as an integer in [lo, hi], or `fallback` where the argument is absent. On a bad
// one: prints "<tool>: error: invalid <name> ..." to stderr and returns false.
inline bool count(int argc, char** argv, int index, const char* tool, const char* name, int64_t lo,
                  int64_t hi, int64_t fallback, int64_t& out) {
  if (index >= argc) {
    out = fallback;
    return true;
  }
  if (const Status s = parse_int(name, argv[index], lo, hi, out); !s.is_ok()) {
    std::fprintf(stderr, "%s: error: %s\n", tool, s.message().c_str());
    return false;
  }
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
