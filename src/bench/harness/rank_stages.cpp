#include "bench/harness/rank_stages.h"

#include <fmt/format.h>

#include <sstream>

namespace moe::bench {

void StageClock::add(const char* stage, double seconds) {
  for (auto& [name, total] : totals_)
    if (name == stage) {
      total += seconds;
      return;
    }
  totals_.emplace_back(stage, seconds);
}

std::string StageClock::encode(int calls) const {
  std::string text;
  for (const auto& [name, total] : totals_)
    text += fmt::format("{} {:.9f}\n", name, total / std::max(1, calls));
  return text;
}

std::string rank_stage_lines(const MoeConfig& c, const std::vector<std::string>& per_rank) {
  std::string lines;
  const std::string head = fmt::format("[{}] pass={}", name(c.distribution), name(c.bench_pass));
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::istringstream in(per_rank[r]);
    std::vector<std::pair<std::string, double>> stages;
    std::string stage;
    double seconds = 0, total = 0;
    while (in >> stage >> seconds) {
      stages.emplace_back(stage, seconds);
      total += seconds;
    }
    std::string pct;
    for (const auto& [s, t] : stages) {
      lines += fmt::format("{} rank={} stage {}_s={:.6f}\n", head, r, s, t);
      pct += fmt::format(" {}={:.1f}", s, total > 0 ? 100 * t / total : 0.0);
    }
    lines += fmt::format("{} rank={} stage_pct{}\n", head, r, pct);
  }
  return lines;
}

}  // namespace moe::bench
