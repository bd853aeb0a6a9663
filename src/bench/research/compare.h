// moe-bench compare BASE NEW [--by KEYS] [--metric tflops|tokens_per_s|time_s|pct_of_ceiling]
//
// A Markdown A/B table of two stores (or two selections of one: STORE:impl=baseline, store.h). Rows
// are matched on their configuration keys (store.h config_keys): by default all of them except the
// treatment, the keys that take one value in BASE and another in NEW (quant_mode none -> int8); with
// --by, on those keys only, and a NEW configuration may then meet its BASE row in several rows (each
// null fraction against null_route_frac=0). Rows of one configuration are pooled. Each matched pair
// shows both values with their spread, the delta in % and a verdict: better or worse, noise when the
// two sides' spreads overlap (metric.h: mean time -/+ one stddev), unmeasured when a side has fewer
// than 2 timed calls; a difference inside the noise is never called a win. Configurations without a
// partner are listed, not dropped. No matched pair at all, an empty store, or a BASE that is ambiguous
// for the match keys is an error.
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

struct CompareOptions {
  std::string base, fresh;      // store arguments (store.h StoreSelection)
  std::vector<std::string> by;  // empty: all configuration keys but the treatment
  std::string metric = "tflops";
  // Inside a logbook entry, which has its own heading and config: no "### compare" line and no list of
  // the keys every pair shares.
  bool in_logbook = false;
};

Status compare_markdown(const CompareOptions& o, std::string& markdown);

int compare_main(int argc, char** argv);

}  // namespace moe::bench
