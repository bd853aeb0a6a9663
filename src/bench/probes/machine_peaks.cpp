#include "bench/probes/machine_peaks.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/probes/bandwidth.h"
#include "cpu/gemm/peak.h"
#include "cpu/gemm/tuning.h"
#include "moe/cpu_isa.h"
#include "moe/environment.h"
#include "moe/json_record.h"

namespace moe::bench {
namespace {

constexpr const char* kFormat = "moe-bench peaks 1";

// Why `doc` is not a peaks file of ours, or "".
std::string not_ours(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("format") || !doc["format"].is_string() || doc["format"] != kFormat ||
      !doc.contains("entries") || !doc["entries"].is_object())
    return fmt::format("not a moe-bench peaks file (\"format\": \"{}\" expected)", kFormat);
  for (const auto& [key, entry] : doc["entries"].items())
    if (!entry.is_object() || !entry.contains("value") ||
        !(entry["value"].is_number() || entry["value"].is_null()))
      return fmt::format("entry \"{}\" has no value", key);
  return "";
}

}  // namespace

std::string MachinePeaks::path_beside_tuning_file(const std::string& tuning_file) {
  if (tuning_file == "none") return "";
  const std::string tuning = GemmTuner::resolve_path(tuning_file);
  if (tuning.empty()) return "";
  const std::filesystem::path dir = std::filesystem::path(tuning).parent_path();
  return (dir.empty() ? std::filesystem::path("peaks.json") : dir / "peaks.json").string();
}

std::string MachinePeaks::key(const std::string& what) const {
  return fmt::format("{} | isa={} | {}", cpu_isa().model, isa_level_name(isa_level()), what);
}

double MachinePeaks::read_gbps(int threads) {
  return kept_bandwidth(threads, fmt::format("threads={} read_gbps", threads));
}

double MachinePeaks::write_gbps(int threads) {
  return kept_bandwidth(threads, fmt::format("threads={} write_gbps", threads));
}

double MachinePeaks::zero_write_gbps(int threads) {
  return kept_bandwidth(threads, fmt::format("threads={} zero_write_gbps", threads));
}

double MachinePeaks::kept_bandwidth(int threads, const std::string& what) {
  if (auto v = cached(what); v && *v) return **v;
  const Bandwidth bw = measure_bandwidth(threads);
  remember_read_gbps(threads, bw.read_gbps);
  remember_write_gbps(threads, bw.write_gbps);
  remember_zero_write_gbps(threads, bw.zero_write_gbps);
  return **cached(what);
}

std::optional<double> MachinePeaks::arithmetic_tflops(int threads, Dtype arithmetic) {
  const std::string what = fmt::format("threads={} peak {}", threads, dtype_name(arithmetic));
  if (auto v = cached(what)) return *v;
  const std::optional<double> tflops = cpu::best_peak(cpu::measure_peaks(threads), arithmetic);
  keep(what, tflops);
  return tflops;
}

void MachinePeaks::remember_read_gbps(int threads, double gbps) {
  keep(fmt::format("threads={} read_gbps", threads), gbps);
}

void MachinePeaks::remember_write_gbps(int threads, double gbps) {
  keep(fmt::format("threads={} write_gbps", threads), gbps);
}

void MachinePeaks::remember_zero_write_gbps(int threads, double gbps) {
  keep(fmt::format("threads={} zero_write_gbps", threads), gbps);
}

void MachinePeaks::remember_arithmetic(int threads, Dtype arithmetic, std::optional<double> tflops) {
  keep(fmt::format("threads={} peak {}", threads, dtype_name(arithmetic)), tflops);
}

std::optional<std::optional<double>> MachinePeaks::cached(const std::string& what) {
  load();
  auto it = values_.find(key(what));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void MachinePeaks::warn(const std::string& why) {
  if (!usable_) return;  // one line per file
  usable_ = false;
  fmt::print(stderr, "moe-bench: warning: peaks file '{}': {}; ignored (peaks measured in this process)\n",
             path_, why);
}

void MachinePeaks::load() {
  if (loaded_) return;
  loaded_ = true;
  nlohmann::json doc;
  if (Status read = read_json_record(path_, "peaks file", not_ours, doc); !read) return warn(read.message());
  if (!doc.contains("entries")) return;
  for (const auto& [k, entry] : doc["entries"].items())
    values_[k] =
        entry["value"].is_null() ? std::nullopt : std::optional<double>(entry["value"].get<double>());
}

void MachinePeaks::keep(const std::string& what, std::optional<double> value) {
  load();
  const std::string k = key(what);
  // A peak is the best any measurement reached: contention only lowers one, so a probe that ran beside other
  // work never replaces a higher one.
  if (auto it = values_.find(k); it != values_.end() && it->second && (!value || *value < *it->second))
    value = it->second;
  values_[k] = value;
  if (path_.empty() || !usable_) return;
  nlohmann::ordered_json entry;
  entry["value"] = value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
  entry["date"] = utc_now_iso8601();
  nlohmann::ordered_json fresh;
  fresh["format"] = kFormat;
  fresh["entries"] = nlohmann::ordered_json::object();
  const Status wrote =
      edit_json_record(path_, "peaks file", not_ours, fresh, [&](nlohmann::ordered_json& doc) {
        const nlohmann::ordered_json& old = doc["entries"][k];
        if (old.is_object() && old["value"].is_number() && (!value || old["value"].get<double>() >= *value))
          return false;  // another process kept a higher one meanwhile
        doc["entries"][k] = entry;
        return true;
      });
  if (!wrote) warn(wrote.message());
}

}  // namespace moe::bench
