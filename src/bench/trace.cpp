#include "bench/trace.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "moe/file_io.h"

namespace moe::bench {

Status write_chrome_trace(const std::string& dir, const std::string& subdir,
                          const std::vector<TraceEvent>& events, std::string& written) {
  const std::filesystem::path path = std::filesystem::path(dir) / subdir;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return Status::error(fmt::format("cannot create trace directory '{}': {}", path.string(), ec.message()));
  nlohmann::json trace;
  trace["displayTimeUnit"] = "ms";
  trace["traceEvents"] = nlohmann::json::array();
  const auto origin = events.empty() ? std::chrono::steady_clock::now() : events.front().start;
  for (const TraceEvent& e : events) {
    auto us = [&](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - origin).count();
    };
    trace["traceEvents"].push_back({{"name", e.stage},
                                    {"ph", "X"},
                                    {"ts", us(e.start)},
                                    {"dur", us(e.end) - us(e.start)},
                                    {"pid", 0},
                                    {"tid", 0}});
  }
  MOE_RETURN_IF_ERROR(write_file_atomic((path / "trace.json").string(), trace.dump(1) + "\n"));
  written = path.string();
  return Status::ok();
}

}  // namespace moe::bench
