// --trace-dir: the seed wrapped each run in a JAX profiler trace; we record one extra, untimed call
// of the run with a timestamp around every block stage (forward and backward) and write it as a
// Chrome trace (chrome://tracing, Perfetto) in the seed's per-run subdirectory naming.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

struct TraceEvent {
  std::string stage;
  std::chrono::steady_clock::time_point start, end;
};

// Writes <dir>/<subdir>/trace.json (atomically) and returns the subdirectory path in `written`.
Status write_chrome_trace(const std::string& dir, const std::string& subdir,
                          const std::vector<TraceEvent>& events, std::string& written);

}  // namespace moe::bench
