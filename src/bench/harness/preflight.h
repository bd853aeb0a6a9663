// Everything a run can be refused for before it prints a line: the memory its shapes need (against
// physical memory and the cgroup limit) and every output target (--out, --dump, --trace-dir), so that
// a bad path never shows up after minutes of runs and a printed RESULT.
#pragma once

#include "bench/harness/options.h"
#include "moe/status.h"

namespace moe::bench {

Status preflight(const BenchOptions& o);

// The first line a results file of o.format must start with for o's rows (the csv header; none for jsonl).
std::string expected_header(const BenchOptions& o);

// The largest topk's working set against memory_limit() (moe/memory_limit.h).
Status check_memory(const BenchOptions& o);

}  // namespace moe::bench
