// The metrics compare and plot read from rows, with their units and direction, and their spread.
//
// A row's spread is that of its timed calls (samples_s, every --repeats block): mean time m and sample
// standard deviation s. A metric's interval is its value at m - s and m + s: [m - s, m + s] for time_s,
// [v m / (m + s), v m / (m - s)] for a rate v (tflops, tokens_per_s, pct_of_ceiling: a constant over
// the time). Rows of one configuration (a store appended to twice) are pooled: their calls together.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "bench/harness/report.h"
#include "moe/status.h"

namespace moe::bench {

struct Metric {
  std::string key;    // the row key
  std::string label;  // with its unit, for table heads and axes
  bool higher_is_better = true;
};

// tflops, tokens_per_s, time_s, pct_of_ceiling, gbps, pct_of_bw_peak, pct_of_roofline (the rates: constant
// x 1 / time).
Status find_metric(std::string_view key, Metric& out);
// A row key with its unit where it has one ("time per call (s)", "topk (K)"), else the key.
std::string key_label(const std::string& key);

struct Spread {
  double value = 0;
  double lo = 0, hi = 0;  // the metric at the mean time -/+ one standard deviation
  size_t calls = 0;       // timed calls pooled
  bool measured() const { return calls >= 2; }
};

// The metric over the pooled calls of `rows` (one configuration). An error when the metric is null
// (pct_of_ceiling of a run without a ceiling).
Status pooled_metric(const std::vector<const ResultRow*>& rows, const Metric& m, Spread& out);

// Whether two spreads overlap (a difference between them is noise).
bool overlaps(const Spread& a, const Spread& b);

// "value ±h%" (h: half the interval, in % of the value), or the value alone when unmeasured.
std::string spread_text(const Spread& s);

// A number for tables: 4 significant digits without trailing zeros, no exponent between 1e-4 and 1e9.
std::string format_number(double v);

}  // namespace moe::bench
