// --trace-dir: the seed wrapped each run in a JAX profiler trace; we record one extra, untimed call
// per queue mode of the run with a timestamp around every block stage (forward and backward) and write
// them as one Chrome trace (chrome://tracing, Perfetto) in the seed's per-run subdirectory
// (seed_lines.h trace_run_dir), one lane (tid) per queue mode.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

struct TraceEvent {
  std::string stage;
  int lane = 0;  // the queue mode's index in the run
  std::chrono::steady_clock::time_point start, end;
};

// Writes <run_dir>/trace.json atomically; run_dir must exist.
Status write_chrome_trace(const std::string& run_dir, const std::vector<TraceEvent>& events);

}  // namespace moe::bench
