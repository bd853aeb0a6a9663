// Result rows with chosen timings for the tests of the research tools (compare, table, plot, log, the
// store readers), so that no assertion depends on this machine's speed.
#pragma once

#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "test_util.h"

namespace moe::testing {

inline MoeConfig tiny(int64_t topk, Impl impl = Impl::fused_w13) {
  MoeConfig c;
  c.tokens = 64, c.hidden = 16, c.mlp_dim = 8, c.experts = 4, c.topk = topk, c.impl = impl;
  return c;
}

// A row of `c` whose timed calls took `samples` seconds.
inline bench::ResultRow timed_row(const MoeConfig& c, std::vector<double> samples,
                                  const std::string& commit = "aaa") {
  bench::Measured m;
  m.time = bench::summarize(std::move(samples));
  m.threads = 1;
  m.null_stats.real_assignments = c.assignments();
  m.null_stats.target = c.null_routing.frac;
  Environment env;
  env.git_commit = commit;
  return bench::make_row(c, KernelConfig{}, bench::Protocol{2, 0, 1, "moe-bench --tokens 64 --topk 1,2", 1, ""}, m,
                         env);
}

// `rows` appended to the jsonl store `path`; returns the path.
inline std::string store(const std::string& path, const std::vector<bench::ResultRow>& rows) {
  EXPECT_TRUE(bench::append_rows(path, bench::OutputFormat::jsonl, rows));
  return path;
}

}  // namespace moe::testing
