// moe-bench table STORE [--columns KEYS]: the rows of a store (or a selection, store.h) as a Markdown
// table, rows of one configuration pooled. By default the configuration keys that vary over the rows,
// then TF/s, tokens/s and time per call with their spread (metric.h) and pct_of_ceiling; with
// --columns, those keys in that order (metrics with their spread).
#pragma once

#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "moe/status.h"

namespace moe::bench {

// The table of `rows` (columns empty: the default ones).
Status rows_table(const std::vector<ResultRow>& rows, const std::vector<std::string>& columns,
                  std::string& markdown);

int table_main(int argc, char** argv);

}  // namespace moe::bench
