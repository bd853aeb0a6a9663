#include "bench/probes/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "moe/file_io.h"

namespace moe::bench {

using Clock = std::chrono::steady_clock;

std::string encode_trace_events(const std::vector<TraceEvent>& events, Clock::time_point origin) {
  std::string text;
  for (const TraceEvent& e : events)
    text +=
        fmt::format("{} {} {} {}\n", e.lane, e.stage, (e.start - origin).count(), (e.end - origin).count());
  return text;
}

std::vector<TraceEvent> decode_trace_events(const std::string& text, int rank, Clock::time_point origin) {
  std::vector<TraceEvent> events;
  std::istringstream in(text);
  TraceEvent e;
  Clock::rep start = 0, end = 0;
  while (in >> e.lane >> e.stage >> start >> end) {
    e.start = origin + Clock::duration(start);
    e.end = origin + Clock::duration(end);
    e.rank = rank;
    events.push_back(e);
  }
  return events;
}

Status write_chrome_trace(const std::string& run_dir, const std::vector<TraceEvent>& events) {
  nlohmann::json trace;
  trace["displayTimeUnit"] = "ms";
  trace["traceEvents"] = nlohmann::json::array();
  Clock::time_point origin = events.empty() ? Clock::now() : events.front().start;
  std::set<int> ranks;
  for (const TraceEvent& e : events) {
    origin = std::min(origin, e.start);
    ranks.insert(e.rank);
  }
  // Over several ranks each rank is a process named after it.
  if (ranks.size() > 1)
    for (int r : ranks)
      trace["traceEvents"].push_back({{"name", "process_name"},
                                      {"ph", "M"},
                                      {"pid", r},
                                      {"args", {{"name", fmt::format("rank {}", r)}}}});
  for (const TraceEvent& e : events) {
    auto us = [&](Clock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - origin).count();
    };
    trace["traceEvents"].push_back({{"name", e.stage},
                                    {"ph", "X"},
                                    {"ts", us(e.start)},
                                    {"dur", us(e.end) - us(e.start)},
                                    {"pid", e.rank},
                                    {"tid", e.lane}});
  }
  return write_file_atomic(run_dir + "/trace.json", trace.dump(1) + "\n");
}

}  // namespace moe::bench
