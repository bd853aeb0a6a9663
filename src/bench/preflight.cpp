#include "bench/preflight.h"

#include <fmt/format.h>

#include "bench/run.h"
#include "moe/file_io.h"
#include "moe/memory_limit.h"

namespace moe::bench {
namespace {

constexpr double kGiB = 1073741824.0;

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

Status check_memory(const BenchOptions& o) {
  const MemoryLimit limit = memory_limit();
  MoeConfig c = o.base;
  for (int64_t k : o.topks) {
    c.topk = k;
    const double need = c.estimated_bytes();
    if (need > 0.9 * limit.bytes)
      return Status::error(
          fmt::format("this shape (--topk {}) needs about {:.1f} GiB but {} allows {:.1f} GiB", k,
                      need / kGiB, limit.source, limit.bytes / kGiB));
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
  if (!o.out_path.empty())
    MOE_RETURN_IF_ERROR(check_append_target(o.out_path, expected_header(o), "--out results file"));
  return Status::ok();
}

}  // namespace moe::bench
