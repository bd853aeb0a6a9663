// One run of the seed's loop on a backend: a (distribution, topk, impl, null fraction) point with its
// queue modes. Times the block per queue mode (--repeats blocks of --warmup + --iters calls), prints the
// seed's lines for it, makes its rows, and does what --check, --dump, --trace-dir and --stage-timing
// ask for. The loop over runs and points is sweep.h's.
#pragma once

#include <vector>

#include "bench/harness/options.h"
#include "bench/harness/report.h"
#include "bench/probes/ceiling.h"
#include "moe/backend.h"
#include "moe/comm.h"
#include "moe/environment.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/routing.h"
#include "moe/status.h"

namespace moe::bench {

struct RunOutcome {
  bool check_failed = false;
  Status output_status;  // a failed --dump or --trace-dir write, or a failed exchange (exit 2)
  Status numerics;       // NaN or inf in the results (exit 1)
  std::vector<ResultRow> rows;
};

// What one run reads: its options and configuration, where it runs, its inputs (`in` in the backend's
// memory, `host_in` the same on the host, for --check and --dump), its routing, and what the sweep
// measured or keeps for it.
struct RunContext {
  const BenchOptions& o;
  const MoeConfig& c;
  Backend& backend;
  Comm& comm;
  const MoeInputs& in;
  const MoeInputs& host_in;
  const Routing& host_routing;
  const NullRoutingStats& null_stats;
  const Ceiling& ceiling;
  const Environment& env;
  bool* csv_header_printed;  // the sweep's: stdout's csv rows get one header
};

// Runs the queue modes of c.o.queue_modes.
RunOutcome run_one(const RunContext& context);

// Every configuration of o's loop runs on the backend and over the comm: asked before anything is
// allocated, so a refusal is one line before any output.
Status check_runnable(const BenchOptions& o, Backend& backend, const Comm& comm);

// The timing protocol of o's rows.
Protocol protocol_of(const BenchOptions& o);

}  // namespace moe::bench
