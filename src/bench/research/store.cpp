#include "bench/research/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "moe/config.h"
#include "moe/environment.h"
#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

bool positive_number(const ResultRow& v) {
  return v.is_number() && v.get<double>() > 0;
}
bool nonnegative_number(const ResultRow& v) {
  return v.is_number() && v.get<double>() >= 0;
}

// samples_s: the timed calls, one non-empty list per --repeats block; a call takes time (rows of zeros read
// as infinite TF/s with a NaN spread, issue 41 item 4).
bool call_times(const ResultRow& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const ResultRow& block : v) {
    if (!block.is_array() || block.empty()) return false;
    for (const ResultRow& t : block)
      if (!positive_number(t)) return false;
  }
  return true;
}

// A value for a message: a row's samples_s may hold thousands of numbers.
std::string shortened(const std::string& text) {
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

// The keys the tools read as numbers, and what each must hold; every other key is shown as text.
// Keys rows of this schema gained after stores of it were written, and what an older row reads for each
// rather than being refused (so a store of an older build still compares with a new one, as
// scripts/ab-commits.sh does): the ISA dispatch's cpu_extensions "unknown"; the cuda backend's
// cuda_gemm_streams its default, since it came with that backend and the cpu backend never reads it; the
// cpuid vendor, family and model (cpu_id) "unknown".
const std::vector<std::pair<std::string, ResultRow>>& keys_added_within_schema() {
  static const std::vector<std::pair<std::string, ResultRow>> keys = {
      {"cpu_extensions", "unknown"},
      {"cuda_gemm_streams", KernelConfig{}.cuda_gemm_streams},
      {"cpu_id", "unknown"}};
  return keys;
}

void fill_keys_added_within_schema(ResultRow& row) {
  if (!row.is_object()) return;
  for (const auto& [k, value] : keys_added_within_schema())
    if (!row.contains(k)) row[k] = value;
}

Status check_values(const ResultRow& row, const std::string& where) {
  struct Rule {
    const char* key;
    bool (*ok)(const ResultRow&);
    const char* expected;
  };
  static const Rule kRules[] = {
      {"run_id", [](const ResultRow& v) { return v.is_string(); }, "a string"},
      {"time_s", positive_number, "a positive number"},
      {"time_stddev_s", nonnegative_number, "a number >= 0"},
      {"samples_s", call_times, "a non-empty list of non-empty lists of positive call times (s)"},
      {"tflops", [](const ResultRow& v) { return v.is_null() || v.is_number(); }, "a number or null"},
      {"tokens_per_s", [](const ResultRow& v) { return v.is_null() || v.is_number(); }, "a number or null"},
      {"pct_of_ceiling", [](const ResultRow& v) { return v.is_null() || v.is_number(); }, "a number or null"},
  };
  for (const Rule& r : kRules) {
    const auto it = row.find(r.key);
    if (it == row.end())
      return Status::error(fmt::format("{}: row_schema {} row without \"{}\"", where, kRowSchema, r.key));
    if (!r.ok(*it))
      return Status::error(
          fmt::format("{}: \"{}\" is {}, expected {}", where, r.key, shortened(it->dump()), r.expected));
  }
  // Rows are grouped, matched and charted by these keys.
  for (const std::vector<std::string>* keys : {&config_keys(), &environment_keys()})
    for (const std::string& k : *keys)
      if (!row.contains(k))
        return Status::error(fmt::format("{}: row_schema {} row without \"{}\"", where, kRowSchema, k));
  return Status::ok();
}

Status check_row(const ResultRow& row, const std::string& where) {
  if (!row.is_object())
    return Status::error(fmt::format(
        "{}: not a jsonl results row (stores are written with --out FILE --format jsonl, or moe-bench sweep)",
        where));
  if (!row.contains("row_schema"))
    return Status::error(fmt::format(
        "{}: a row without row_schema, written by an older moe-bench; this one reads row_schema {}: use a "
        "new store",
        where, kRowSchema));
  if (row["row_schema"] != kRowSchema)
    return Status::error(fmt::format(
        "{}: row_schema {}, but this moe-bench reads row_schema {} only: use a new store or the moe-bench "
        "that wrote it",
        where, row["row_schema"].dump(), kRowSchema));
  return check_values(row, where);
}

// Reads the rows of `path` from `offset` on: whole lines, advancing `offset` and `line` past them, then
// a last line without its '\n' when it parses (a whole row whose newline an editor dropped; one that
// does not parse is a row being written, or torn, and is skipped), which the next call reads again.
// on_row(row, whole_line).
template <typename OnRow>
Status read_rows(const std::string& path, uint64_t& offset, int64_t& line, OnRow on_row) {
  std::string text;
  MOE_RETURN_IF_ERROR(read_regular_file(path, offset, text, "store"));
  size_t start = 0;
  auto one = [&](std::string_view l, int64_t number, bool whole) {
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) return Status::ok();
    if (json_depth(l) > kMaxJsonDepth)
      return Status::error(fmt::format("{}:{}: a row nested deeper than {} levels (no row of ours nests)",
                                       path, number, kMaxJsonDepth));
    ResultRow row = ResultRow::parse(l, nullptr, false);
    if (!whole && !row.is_object()) return Status::ok();
    if (row.is_discarded()) row = nullptr;
    fill_keys_added_within_schema(row);
    MOE_RETURN_IF_ERROR(check_row(row, fmt::format("{}:{}", path, number)));
    on_row(std::move(row), whole);
    return Status::ok();
  };
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    MOE_RETURN_IF_ERROR(one(std::string_view(text).substr(start, nl - start), ++line, true));
  offset += start;
  return one(std::string_view(text).substr(start), line + 1, false);
}

bool value_matches(const ResultRow& v, const std::string& text) {
  if (v.is_number()) {
    double want = 0;
    return parse_double("", text, want) && want == v.get<double>();
  }
  return value_text(v) == text;
}

std::vector<std::string> keys_of(const std::vector<std::string>& jsons, std::vector<std::string> extra) {
  std::vector<std::string> keys;
  for (const std::string& j : jsons) {
    const ResultRow fields = ResultRow::parse(j);
    for (auto it = fields.begin(); it != fields.end(); ++it) keys.push_back(it.key());
  }
  keys.insert(keys.end(), extra.begin(), extra.end());
  std::vector<std::string> unique;
  for (const std::string& k : keys)
    if (std::find(unique.begin(), unique.end(), k) == unique.end()) unique.push_back(k);
  return unique;
}

}  // namespace

Status read_store(const std::string& path, std::vector<ResultRow>& rows) {
  rows.clear();
  uint64_t offset = 0;
  int64_t line = 0;
  MOE_RETURN_IF_ERROR(
      read_rows(path, offset, line, [&](ResultRow&& r, bool) { rows.push_back(std::move(r)); }));
  if (rows.empty()) return Status::error(fmt::format("store {}: no rows", path));
  return Status::ok();
}

Status StoreIndex::refresh() {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A missing file is an empty store, and so is a device or a pipe: rows go to it, none come back.
  const fs::file_type type = fs::status(path_, ec).type();
  if (type == fs::file_type::not_found || type == fs::file_type::character || type == fs::file_type::fifo)
    return Status::ok();
  tail_id_.clear();
  return read_rows(path_, offset_, lines_, [&](ResultRow&& r, bool whole) {
    if (!whole) {
      tail_id_ = r["run_id"].get<std::string>();
      return;
    }
    ids_.insert(r["run_id"].get<std::string>());
    ++rows_;
  });
}

StoreSelection parse_selection(const std::string& arg) {
  StoreSelection s{arg, arg, {}};
  const size_t colon = arg.rfind(':');
  std::error_code ec;
  if (colon == std::string::npos || std::filesystem::exists(arg, ec)) return s;
  const std::string tail = arg.substr(colon + 1);
  if (tail.find('=') == std::string::npos) return s;
  s.path = arg.substr(0, colon);
  for (std::string_view item : list_items(tail)) {
    const size_t eq = item.find('=');
    s.where.emplace_back(std::string(item.substr(0, eq)),
                         eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1)));
  }
  return s;
}

Status load_selection(const StoreSelection& s, std::vector<ResultRow>& rows) {
  MOE_RETURN_IF_ERROR(read_store(s.path, rows));
  for (const auto& [key, value] : s.where) {
    std::vector<std::string> seen;
    std::vector<ResultRow> kept;
    for (ResultRow& r : rows) {
      if (!r.contains(key)) continue;
      const std::string text = value_text(r[key]);
      if (std::find(seen.begin(), seen.end(), text) == seen.end()) seen.push_back(text);
      if (value_matches(r[key], value)) kept.push_back(std::move(r));
    }
    if (seen.empty())
      return Status::error(fmt::format("{}: the rows of {} have no key \"{}\"", s.arg, s.path, key));
    if (kept.empty())
      return Status::error(
          fmt::format("{}: no row has {}={} ({} takes {})", s.arg, key, value, key, fmt::join(seen, ", ")));
    rows = std::move(kept);
  }
  return Status::ok();
}

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> keys =
      keys_of({MoeConfig{}.to_json(), KernelConfig{}.to_json()}, {"mode", "iters", "warmup", "repeats"});
  return keys;
}

const std::vector<std::string>& run_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = config_keys();
    for (const char* extra : {"world_size", "mesh_data", "mesh_expert", "ep_overlap", "renormalize_topk"})
      if (std::find(k.begin(), k.end(), extra) == k.end()) k.push_back(extra);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& environment_keys() {
  static const std::vector<std::string> keys = keys_of({Environment{}.to_json()}, {});
  return keys;
}

std::string value_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "none";
  return v.dump();
}

std::vector<std::string> varying_keys(const std::vector<const ResultRow*>& rows,
                                      const std::vector<std::string>& keys) {
  std::vector<std::string> varying;
  for (const std::string& k : keys) {
    for (const ResultRow* r : rows)
      if (r->value(k, ResultRow()) != rows.front()->value(k, ResultRow())) {
        varying.push_back(k);
        break;
      }
  }
  return varying;
}

std::string key_values(const ResultRow& row, const std::vector<std::string>& keys, std::string_view sep) {
  std::string s;
  for (const std::string& k : keys)
    s += fmt::format("{}{}={}", s.empty() ? "" : sep, k, value_text(row.value(k, ResultRow())));
  return s;
}

}  // namespace moe::bench

namespace moe::bench {

std::vector<std::vector<const ResultRow*>> group_rows(const std::vector<ResultRow>& rows,
                                                      const std::vector<std::string>& keys) {
  std::vector<std::vector<const ResultRow*>> groups;
  std::map<std::string, size_t> index;
  for (const ResultRow& r : rows) {
    ResultRow k = ResultRow::array();
    for (const std::string& key : keys) k.push_back(r.value(key, ResultRow()));
    auto [it, fresh] = index.emplace(k.dump(), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(&r);
  }
  return groups;
}

}  // namespace moe::bench
