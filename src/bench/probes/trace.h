// --trace-dir: the seed wrapped each run in a JAX profiler trace; we record one extra, untimed call
// per queue mode of the run with a timestamp around every block stage (forward and backward) and write
// them as one Chrome trace (chrome://tracing, Perfetto) in the seed's per-run subdirectory
// (seed_lines.h trace_run_dir), one lane (tid) per queue mode and one process (pid) per rank: over
// several ranks each rank records its own stages (its exchanges included) and rank 0 writes them all.
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
  int rank = 0;
};

// A rank's events as text for rank 0 (gather_text), times relative to `origin` (each rank's origin is
// the end of one barrier, so the ranks' lanes line up to within that barrier's skew, across hosts too).
std::string encode_trace_events(const std::vector<TraceEvent>& events,
                                std::chrono::steady_clock::time_point origin);
// The events of encode_trace_events on rank 0's clock (`origin`: its own), marked as `rank`'s.
std::vector<TraceEvent> decode_trace_events(const std::string& text, int rank,
                                            std::chrono::steady_clock::time_point origin);

// Writes <run_dir>/trace.json atomically; run_dir must exist.
Status write_chrome_trace(const std::string& run_dir, const std::vector<TraceEvent>& events);

}  // namespace moe::bench
