#include "bench/harness/preflight.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "bench/harness/run.h"
#include "moe/file_io.h"
#include "moe/memory_limit.h"

namespace moe::bench {
namespace {

constexpr double kGiB = 1073741824.0;

// A results file takes one format: a name ending in .jsonl or .csv is that format's, and a file holding jsonl
// rows (its first byte a '{') takes jsonl rows only (text rows were appended to a jsonl store, after which
// every reader refused it: issue 41 item 4).
Status check_out_format(const BenchOptions& o) {
  const std::string& path = o.out_path;
  const char* given = o.format == OutputFormat::jsonl ? "jsonl"
                      : o.format == OutputFormat::csv ? "csv"
                                                      : "text";
  for (const char* kind : {"jsonl", "csv"}) {
    const std::string suffix = std::string(".") + kind;
    if (path.size() > suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0 && std::string(given) != kind)
      return Status::error(
          fmt::format("--out '{}' is named a {} store but --format is {}: give --format {} or another name",
                      path, kind, given, kind));
  }
  std::error_code ec;
  if (o.format != OutputFormat::jsonl && std::filesystem::is_regular_file(path, ec)) {
    std::ifstream f(path, std::ios::binary);
    if (f.peek() == '{')
      return Status::error(
          fmt::format("--out '{}' holds jsonl rows but --format is {}: give --format jsonl or another file",
                      path, given));
  }
  return Status::ok();
}

}  // namespace

// The keys of any row of this build, format and --check.
std::string expected_header(const BenchOptions& o) {
  Measured m;
  m.time = summarize({1.0});
  m.ceiling.tflops = 1.0;
  ResultRow row = make_row(o.base, o.kernel, protocol_of(o), m, Environment{});
  if (o.check) add_check_fields(row, ConditionedCheck{});
  return file_header(o.format, row);
}

namespace {

// The largest value in [lo, hi] of `field` with which c fits in `budget` bytes (0: none does).
int64_t largest_that_fits(MoeConfig c, int64_t MoeConfig::*field, int64_t lo, int64_t hi, double budget) {
  int64_t best = 0;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    c.*field = mid;
    if (c.estimated_bytes() <= budget) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

// What would fit instead of c: fewer experts, fewer tokens, or the experts sharded over EP ranks (each
// rank holds E / R of them).
std::string what_fits(const MoeConfig& c, double budget) {
  std::vector<std::string> ways;
  if (const int64_t e = largest_that_fits(c, &MoeConfig::experts, c.topk, c.experts, budget); e > 0)
    ways.push_back(fmt::format("--experts {}", e));
  if (const int64_t t = largest_that_fits(c, &MoeConfig::tokens, 1, c.tokens, budget); t > 0)
    ways.push_back(fmt::format("--tokens {}", t));
  for (int64_t ranks = 2; ranks <= c.experts; ++ranks) {
    MoeConfig shard = c;
    shard.experts = c.experts / ranks;
    if (c.experts % ranks == 0 && shard.experts >= 1 && shard.estimated_bytes() <= budget) {
      ways.push_back(fmt::format("--parallel-mode ep over {} ranks ({} experts each)", ranks, shard.experts));
      break;
    }
  }
  if (ways.empty()) return "";
  std::string text = "; it would fit with ";
  for (size_t i = 0; i < ways.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ways.size() ? ", or " : ", ") + ways[i];
  return text;
}

}  // namespace

Status check_memory(const BenchOptions& o) {
  const MemoryLimit limit = memory_limit();
  MoeConfig c = o.base;
  const double budget = 0.9 * limit.bytes;
  for (int64_t k : o.topks) {
    c.topk = k;
    const double need = c.estimated_bytes();
    if (need > budget)
      return Status::error(
          fmt::format("this shape (--topk {}) needs about {:.1f} GiB but {} allows {:.1f} GiB{}", k,
                      need / kGiB, limit.source, limit.bytes / kGiB, what_fits(c, budget)));
  }
  return Status::ok();
}

Status preflight(const BenchOptions& o) {
  MOE_RETURN_IF_ERROR(check_memory(o));
  if (!o.dump_dir.empty()) {
    const size_t runs = o.distributions.size() * o.topks.size() * o.impls.size() * o.null_fracs.size();
    if (runs > 1) return Status::error("--dump takes a single run (one distribution, topk and impl)");
    MOE_RETURN_IF_ERROR(prepare_output_dir("--dump directory", o.dump_dir));
  }
  if (!o.trace_dir.empty()) MOE_RETURN_IF_ERROR(prepare_output_dir("--trace-dir directory", o.trace_dir));
  if (!o.out_path.empty()) {
    MOE_RETURN_IF_ERROR(check_out_format(o));
    MOE_RETURN_IF_ERROR(check_append_target(o.out_path, expected_header(o), "--out results file"));
  }
  return Status::ok();
}

}  // namespace moe::bench
