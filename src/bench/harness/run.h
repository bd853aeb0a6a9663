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

// `in` is in the backend's memory, `host_in` the same inputs on the host (for --check and --dump).
// Runs the queue modes of o.queue_modes.
RunOutcome run_one(const BenchOptions& o, const MoeConfig& c, Backend& backend, Comm& comm,
                   const MoeInputs& in, const MoeInputs& host_in, const Routing& host_routing,
                   const NullRoutingStats& null_stats, const Ceiling& ceiling, const Environment& env);

// Every configuration of o's loop runs on the backend and over the comm: asked before anything is
// allocated, so a refusal is one line before any output.
Status check_runnable(const BenchOptions& o, Backend& backend, const Comm& comm);

// The timing protocol of o's rows.
Protocol protocol_of(const BenchOptions& o);

}  // namespace moe::bench
