#include "bench/trace.h"

#include <nlohmann/json.hpp>

#include "moe/file_io.h"

namespace moe::bench {

Status write_chrome_trace(const std::string& run_dir, const std::vector<TraceEvent>& events) {
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
                                    {"tid", e.lane}});
  }
  return write_file_atomic(run_dir + "/trace.json", trace.dump(1) + "\n");
}

}  // namespace moe::bench
