// --stage-timing over several ranks. The single-process stages (pack, up, down, combine, each timed
// alone from the previous one's buffers) cannot be run apart where rows cross ranks between them, so
// each rank times the stages of whole calls instead (the block's stage observer: every exchange is a
// stage of its own, exchange_dispatch, exchange_combine, ...), and rank 0 prints every rank's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "moe/config.h"

namespace moe::bench {

// A rank's seconds per stage, in the order the stages first ran.
class StageClock {
 public:
  void add(const char* stage, double seconds);
  // "stage mean_seconds" lines, the totals over `calls` calls, for gather_text.
  std::string encode(int calls) const;

 private:
  std::vector<std::pair<std::string, double>> totals_;
};

// Rank 0's lines from every rank's StageClock::encode, per rank r and stage s:
//   [<distribution>] pass=<pass> rank=<r> stage <s>_s=<mean seconds>
//   [<distribution>] pass=<pass> rank=<r> stage_pct <s>=<% of the rank's stages> ...
std::string rank_stage_lines(const MoeConfig& c, const std::vector<std::string>& per_rank);

}  // namespace moe::bench
