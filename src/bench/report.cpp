#include "bench/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace moe::bench {

const char* name(OutputFormat f) {
  switch (f) {
    case OutputFormat::text: return "text";
    case OutputFormat::jsonl: return "jsonl";
    case OutputFormat::csv: return "csv";
  }
  return "?";
}

namespace {

std::string scalar_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return fmt::format("{:.6f}", v.get<double>());
  return v.dump();
}

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

std::string format_text(const std::string& seed_part, const ResultRow& row, const std::vector<std::string>& skip) {
  std::string line = seed_part;
  for (auto it = row.begin(); it != row.end(); ++it) {
    if (std::find(skip.begin(), skip.end(), it.key()) != skip.end()) continue;
    line += " " + it.key() + "=" + scalar_text(it.value());
  }
  return line;
}

std::string format_jsonl(const ResultRow& row) { return row.dump(); }

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
  if (fd < 0) return Status::error(fmt::format("cannot write results file '{}': {}", path, std::strerror(errno)));
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
