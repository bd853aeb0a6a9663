#include "cpu/gemm/tuning.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cpu/gemm/gemm.h"
#include "moe/build_info.h"
#include "moe/cpu_isa.h"
#include "moe/environment.h"
#include "moe/file_io.h"
#include "moe/json_record.h"
#include "moe/parse.h"

namespace moe {
namespace {

constexpr const char* kFormat = "moe-bench tuning 1";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Why `doc` is not a tuning file of this CPU, or "".
std::string not_ours(const nlohmann::json& doc) {
  // Each key's type is asked first: nlohmann's value() and get() throw on another type.
  if (!doc.is_object() || !doc.contains("format") || !doc["format"].is_string() || doc["format"] != kFormat ||
      !doc.contains("cpu_model") || !doc["cpu_model"].is_string() || !doc.contains("entries") ||
      !doc["entries"].is_object())
    return fmt::format("not a moe-bench tuning file (\"format\": \"{}\" expected)", kFormat);
  for (const auto& [key, entry] : doc["entries"].items())
    if (!entry.is_object() || !entry.contains("variant") || !entry["variant"].is_string())
      return fmt::format("entry \"{}\" has no variant", key);
  if (doc["cpu_model"].get<std::string>() != cpu_isa().model)
    return fmt::format("made on CPU \"{}\", this is \"{}\"", doc["cpu_model"].get<std::string>(),
                       cpu_isa().model);
  return "";
}

// The candidates an entry's measurement timed: its "seconds" keys (none where it has none).
template <class Json>
std::set<std::string> timed_by(const Json& entry) {
  std::set<std::string> timed;
  if (entry.contains("seconds") && entry["seconds"].is_object())
    for (const auto& [name, s] : entry["seconds"].items()) timed.insert(name);
  return timed;
}

// Whether `timed` holds every one of `names`.
bool times_all(const std::set<std::string>& timed, const std::vector<std::string>& names) {
  return std::all_of(names.begin(), names.end(), [&](const std::string& n) { return timed.count(n) > 0; });
}

}  // namespace

namespace {

// The first word of a sysfs file, "" where it cannot be read.
std::string sysfs_word(const std::string& path) {
  std::ifstream file(path);
  std::string word;
  file >> word;
  return word;
}

// cpu 0's data or unified cache of `level` as sysfs describes it (cache/indexN: level, type, size), 0 where
// it says nothing.
size_t sysfs_cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string found = sysfs_word(dir + "level");
    if (found.empty()) return 0;
    if (found != std::to_string(level) || sysfs_word(dir + "type") == "Instruction") continue;
    unsigned long kib = 0;
    return std::sscanf(sysfs_word(dir + "size").c_str(), "%luK", &kib) == 1 ? size_t(kib) * 1024 : 0;
  }
  return 0;
}

}  // namespace

size_t last_level_cache_bytes() {
  constexpr size_t kMiB = size_t(1) << 20;
  size_t bytes = sysfs_cache_bytes(3);
  if (bytes == 0) bytes = size_t(std::max<long>(0, sysconf(_SC_LEVEL3_CACHE_SIZE)));
  if (bytes == 0) bytes = 32 * kMiB;
  return std::clamp(bytes, 16 * kMiB, 256 * kMiB);
}

size_t core_l2_cache_bytes() {
  constexpr size_t kKiB = 1024;
  size_t bytes = sysfs_cache_bytes(2);
  if (bytes == 0) bytes = size_t(std::max<long>(0, sysconf(_SC_LEVEL2_CACHE_SIZE)));
  if (bytes == 0) bytes = 1024 * kKiB;
  return std::clamp(bytes, 256 * kKiB, 8192 * kKiB);
}

CacheEvictor::CacheEvictor() : words_(2 * last_level_cache_bytes() / sizeof(uint64_t)) {
  uint64_t* w = words_.data();
  const int64_t n = int64_t(words_.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] = uint64_t(i);
}

void CacheEvictor::evict() const {
  const uint64_t* w = words_.data();
  const int64_t n = int64_t(words_.size());
  uint64_t sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += w[i];
  volatile uint64_t sink = sum;  // the reads must happen
  (void)sink;
}

bool weights_come_cold(const GemmCall& call) {
  return call.form != GemmForm::dense && call.rows <= kFewRows;
}

std::optional<size_t> preferred_candidate(const GemmCall& call, const std::vector<std::string>& names,
                                          const std::vector<double>& times) {
  if (!weights_come_cold(call) || !call.weights_kept) return std::nullopt;
  std::optional<size_t> preferred;
  for (size_t i = 0; i < names.size(); ++i)
    if (packs_kept_bf16_weights(names[i]) && (!preferred || times[i] < times[*preferred])) preferred = i;
  return preferred;
}

size_t pick_candidate(const std::vector<double>& times, std::optional<size_t> preferred) {
  size_t fastest = 0;
  for (size_t i = 0; i < times.size(); ++i)
    if (times[i] < times[fastest]) fastest = i;
  if (preferred && times[fastest] * kColdMargin >= times[*preferred]) return *preferred;
  return fastest;
}

std::vector<double> time_candidates(size_t n, const std::function<double(size_t)>& call) {
  constexpr double kHopeless = 8, kContender = 1.6, kExtraBudgetSeconds = 3;
  constexpr int kExtraRounds = 2;
  std::vector<double> fastest(n);
  double best_first = 0, best = 0;
  for (size_t i = 0; i < n; ++i) {
    const double first = call(i);
    fastest[i] = best_first > 0 && first > kHopeless * best_first ? first : call(i);
    if (best_first == 0 || first < best_first) best_first = first;
    if (best == 0 || fastest[i] < best) best = fastest[i];
  }
  std::vector<size_t> contenders;
  for (size_t i = 0; i < n; ++i)
    if (fastest[i] <= kContender * best) contenders.push_back(i);
  double extra = 0;
  for (int round = 0; round < kExtraRounds && contenders.size() > 1 && extra < kExtraBudgetSeconds; ++round) {
    std::reverse(contenders.begin(), contenders.end());
    for (size_t i : contenders) {
      const double s = call(i);
      fastest[i] = std::min(fastest[i], s);
      extra += s;
    }
  }
  return fastest;
}

GemmTuner::GemmTuner(std::string path, bool retune, std::string wait_policy)
    : path_(std::move(path)), retune_(retune), wait_policy_(std::move(wait_policy)) {}

std::string GemmTuner::resolve_path(const std::string& tuning_file) {
  if (!tuning_file.empty()) return tuning_file;
  if (std::string p = env("MOE_TUNING_FILE"); !p.empty()) return p;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/moe-bench/tuning.json";
  if (std::string home = env("HOME"); !home.empty()) return home + "/.cache/moe-bench/tuning.json";
  return "";
}

std::string GemmTuner::key(const std::string& shape_class) const {
  const std::string wait = wait_policy_.empty() ? "" : " wait=" + wait_policy_;
  return fmt::format("isa={} threads={}{} libs={}; moe-bench {} | {}", isa_level_name(isa_level()),
                     omp_get_max_threads(), wait, gemm_library_version(), build_version(), shape_class);
}

void GemmTuner::warn(const std::string& why) {
  if (!writable_) return;  // one line per file
  writable_ = false;
  fmt::print(stderr, "moe-bench: warning: tuning file '{}': {}; ignored (measured choices stay in memory)\n",
             path_, why);
}

void GemmTuner::load() {
  if (loaded_) return;
  loaded_ = true;
  nlohmann::json doc;
  if (Status read = read_json_record(path_, "tuning file", not_ours, doc); !read) return warn(read.message());
  if (doc.contains("entries"))
    for (const auto& [k, entry] : doc["entries"].items()) entries_[k] = {entry["variant"], timed_by(entry)};
}

std::optional<std::string> GemmTuner::lookup(const std::string& shape_class,
                                             const std::vector<std::string>& candidates) {
  load();
  const std::string k = key(shape_class);
  if (retune_ && !measured_here_.count(k)) return std::nullopt;
  auto it = entries_.find(k);
  if (it == entries_.end() || !times_all(it->second.timed, candidates)) return std::nullopt;
  return it->second.variant;
}

void GemmTuner::record(const std::string& shape_class, const std::string& variant,
                       const std::vector<std::pair<std::string, double>>& seconds) {
  load();
  const std::string k = key(shape_class);
  std::vector<std::string> timed;
  for (const auto& [name, s] : seconds) timed.push_back(name);
  entries_[k] = {variant, {timed.begin(), timed.end()}};
  measured_here_.insert(k);
  if (path_.empty() || !writable_) return;
  nlohmann::ordered_json entry;
  entry["variant"] = variant;
  for (const auto& [name, s] : seconds) entry["seconds"][name] = s;
  entry["date"] = utc_now_iso8601();
  nlohmann::ordered_json fresh;
  fresh["format"] = kFormat;
  fresh["cpu_model"] = cpu_isa().model;
  fresh["entries"] = nlohmann::ordered_json::object();
  const Status wrote =
      edit_json_record(path_, "tuning file", not_ours, fresh, [&](nlohmann::ordered_json& doc) {
        if (!retune_ && doc["entries"].contains(k) && times_all(timed_by(doc["entries"][k]), timed))
          return false;
        doc["entries"][k] = entry;
        return true;
      });
  if (!wrote) warn(wrote.message());
}

}  // namespace moe
