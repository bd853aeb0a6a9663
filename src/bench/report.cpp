#include "bench/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench/accounting.h"

namespace moe::bench {

const char* name(OutputFormat f) {
  switch (f) {
    case OutputFormat::text:
      return "text";
    case OutputFormat::jsonl:
      return "jsonl";
    case OutputFormat::csv:
      return "csv";
  }
  return "?";
}

namespace {

std::string csv_field(const nlohmann::ordered_json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

Status read_file(const std::string& path, std::string& content, bool& exists) {
  std::ifstream in(path, std::ios::binary);
  exists = bool(in);
  if (!exists) return Status::ok();
  std::ostringstream ss;
  ss << in.rdbuf();
  content = ss.str();
  return Status::ok();
}

Status write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::error(fmt::format("cannot write results file '{}': {}", path, std::strerror(errno)));
    }
    done += size_t(n);
  }
  return Status::ok();
}

}  // namespace

// Our keys appended to the text RESULT line; jsonl/csv rows carry everything.
static const std::vector<std::string> kTextExtraKeys = {
    "dtype",      "time_s",         "time_median_s",   "time_min_s",
    "time_max_s", "ceiling_tflops", "pct_of_ceiling",  "saved_activation_bytes",
    "threads",    "remat_mode",     "capacity_policy", "shared_expert_dim",
    "tokens",     "hidden",         "mlp_dim",         "experts",
    "device"};

std::string result_text(const ResultRow& r) {
  std::string line = fmt::format(
      "RESULT distribution={} mode={} pass={} impl={} backend={} topk={} null_target={:.3f} "
      "null_realized={:.3f} "
      "null_mode={} null_assignments={} real_assignments={} tflops={:.6f} tokens_per_s={:.6f}",
      r["distribution"].get<std::string>(), r["mode"].get<std::string>(), r["pass"].get<std::string>(),
      r["impl"].get<std::string>(), r["backend"].get<std::string>(), r["topk"].get<int64_t>(),
      r["null_target"].get<double>(), r["null_realized"].get<double>(), r["null_mode"].get<std::string>(),
      r["null_assignments"].get<int64_t>(), r["real_assignments"].get<int64_t>(), r["tflops"].get<double>(),
      r["tokens_per_s"].get<double>());
  for (const std::string& k : kTextExtraKeys) {
    const auto& v = r[k];
    line += " " + k + "=" +
            (v.is_number_float() ? fmt::format("{:.6f}", v.get<double>())
             : v.is_string()     ? v.get<std::string>()
                                 : v.dump());
  }
  return line;
}

ResultRow make_row(const MoeConfig& c, const KernelConfig& k, const char* mode, const TimingStats& t,
                   double ceiling, int64_t saved_bytes, int threads, const NullRoutingStats& null_stats,
                   const Environment& env) {
  const int64_t real = null_stats.real_assignments;
  const double tflops = seed_flops(c, real) / t.mean / 1e12;
  ResultRow r;
  r["distribution"] = name(c.distribution);
  r["mode"] = mode;
  r["pass"] = name(c.bench_pass);
  r["impl"] = name(c.impl);
  r["backend"] = name(c.gemm_backend);
  r["topk"] = c.topk;
  r["null_target"] = null_stats.target;
  r["null_realized"] = null_stats.realized;
  r["null_mode"] = name(c.null_routing.mode);
  r["null_assignments"] = null_stats.null_assignments;
  r["real_assignments"] = real;
  r["tflops"] = tflops;
  r["tokens_per_s"] = double(c.tokens) / t.mean;
  r["dtype"] = dtype_name(c.dtype);
  r["time_s"] = t.mean;
  r["time_median_s"] = t.median;
  r["time_min_s"] = t.min;
  r["time_max_s"] = t.max;
  r["ceiling_tflops"] = ceiling;
  r["pct_of_ceiling"] = 100.0 * tflops / ceiling;
  r["saved_activation_bytes"] = saved_bytes;
  r["threads"] = threads;
  // Full config, kernel config and environment, without repeating a key already in the row.
  for (const std::string& extra : {c.to_json(), k.to_json(), env.to_json()}) {
    const ResultRow fields = ResultRow::parse(extra);
    for (auto it = fields.begin(); it != fields.end(); ++it)
      if (!r.contains(it.key())) r[it.key()] = it.value();
  }
  return r;
}

std::string format_jsonl(const ResultRow& row) {
  return row.dump();
}

std::string csv_header(const ResultRow& row) {
  std::string s;
  for (auto it = row.begin(); it != row.end(); ++it) s += (s.empty() ? "" : ",") + it.key();
  return s;
}

std::string format_csv(const ResultRow& row) {
  std::string s;
  bool first = true;
  for (auto it = row.begin(); it != row.end(); ++it) {
    s += (first ? "" : ",") + csv_field(it.value());
    first = false;
  }
  return s;
}

Status append_rows(const std::string& path, OutputFormat format, const std::vector<std::string>& text_lines,
                   const std::vector<ResultRow>& rows) {
  std::string content;
  bool exists = false;
  MOE_RETURN_IF_ERROR(read_file(path, content, exists));
  if (!content.empty() && content.back() != '\n') content += '\n';  // never glue onto a foreign last line
  if (format == OutputFormat::csv && !rows.empty()) {
    const std::string header = csv_header(rows.front());
    if (content.empty()) {
      content = header + "\n";
    } else if (content.substr(0, content.find('\n')) != header) {
      return Status::error(fmt::format("results file '{}' has a different csv header; use a new file", path));
    }
  }
  if (format == OutputFormat::text)
    for (const std::string& line : text_lines) content += line + "\n";
  for (const ResultRow& row : rows) {
    if (format == OutputFormat::jsonl) content += format_jsonl(row) + "\n";
    if (format == OutputFormat::csv) content += format_csv(row) + "\n";
  }
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return Status::error(fmt::format("cannot write results file '{}': {}", path, std::strerror(errno)));
  Status s = write_all(fd, content, path);
  if (s && ::fsync(fd) != 0)
    s = Status::error(fmt::format("cannot sync results file '{}': {}", path, std::strerror(errno)));
  ::close(fd);
  if (s && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::error(fmt::format("cannot replace results file '{}': {}", path, std::strerror(errno)));
  if (!s) ::unlink(tmp.c_str());
  return s;
}

}  // namespace moe::bench
