#include "bench/research/metric.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/harness/timing.h"
#include "bench/research/store.h"

namespace moe::bench {

Status find_metric(std::string_view key, Metric& out) {
  static const std::vector<Metric> kMetrics = {{"tflops", "TF/s", true},
                                               {"tokens_per_s", "tokens/s", true},
                                               {"time_s", "time per call (s)", false},
                                               {"pct_of_ceiling", "% of the dense GEMM ceiling", true},
                                               {"gbps", "GB/s moved (compulsory bytes)", true},
                                               {"pct_of_bw_peak", "% of the memory bandwidth peak", true},
                                               {"pct_of_roofline", "% of the per-expert roofline", true}};
  std::string keys;
  for (const Metric& m : kMetrics) {
    if (m.key == key) {
      out = m;
      return Status::ok();
    }
    keys += (keys.empty() ? "" : ", ") + m.key;
  }
  return Status::error(fmt::format("invalid metric '{}': expected one of {}", key, keys));
}

std::string key_label(const std::string& key) {
  Metric m;
  if (find_metric(key, m)) return m.label;
  static const std::vector<std::pair<std::string, std::string>> kUnits = {
      {"tokens", "tokens (T)"},
      {"hidden", "hidden (H)"},
      {"mlp_dim", "mlp_dim (M)"},
      {"experts", "experts (E)"},
      {"topk", "topk (K)"},
      {"shared_expert_dim", "shared_expert_dim (S)"},
      {"null_route_frac", "null route fraction"},
      {"null_target", "null route fraction"},
      {"null_realized", "realized null fraction"},
      {"ceiling_tflops", "dense GEMM ceiling (TF/s)"},
      {"time_median_s", "median time per call (s)"},
      {"saved_activation_bytes", "saved activations (bytes)"},
      {"threads", "threads"}};
  for (const auto& [k, label] : kUnits)
    if (k == key) return label;
  return key;
}

Status pooled_metric(const std::vector<const ResultRow*>& rows, const Metric& m, Spread& out) {
  std::vector<double> calls;
  double constant = 0;  // value x mean time, for a rate
  for (const ResultRow* r : rows) {
    const ResultRow v = r->value(m.key, ResultRow());
    if (!v.is_number())
      return Status::error(fmt::format("{} is {} in a row ({}): no ceiling was timed", m.key, value_text(v),
                                       (*r)["run_id"].get<std::string>()));
    constant += v.get<double>() * (*r)["time_s"].get<double>() / double(rows.size());
    for (const ResultRow& block : (*r)["samples_s"])
      for (const ResultRow& s : block) calls.push_back(s.get<double>());
  }
  MOE_CHECK(!calls.empty(), "a row of this schema has samples");
  const TimingStats t = summarize(calls);
  out.calls = calls.size();
  if (m.key == "time_s") {
    out.value = t.mean;
    out.lo = t.mean - t.stddev;
    out.hi = t.mean + t.stddev;
  } else {
    out.value = constant / t.mean;
    out.lo = constant / (t.mean + t.stddev);
    out.hi = t.mean > t.stddev ? constant / (t.mean - t.stddev) : std::numeric_limits<double>::infinity();
  }
  return Status::ok();
}

bool overlaps(const Spread& a, const Spread& b) {
  return a.lo <= b.hi && b.lo <= a.hi;
}

std::string spread_text(const Spread& s) {
  if (!s.measured()) return format_number(s.value);
  return fmt::format("{} ±{:.1f}%", format_number(s.value), 50.0 * (s.hi - s.lo) / s.value);
}

std::string format_number(double v) {
  const double a = std::fabs(v);
  if (a == 0 || !std::isfinite(v)) return fmt::format("{}", v);
  if (a >= 1e9 || a < 1e-4) return fmt::format("{:.3e}", v);
  if (a >= 1000) return fmt::format("{:.0f}", v);
  const int decimals = 3 - int(std::floor(std::log10(a)));
  std::string s = fmt::format("{:.{}f}", v, std::max(0, decimals));
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace moe::bench
