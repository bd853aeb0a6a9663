#include "bench/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "moe/environment.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

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
  for (const char* key : {"run_id", "time_s", "time_stddev_s", "samples_s"})
    if (!row.contains(key))
      return Status::error(fmt::format("{}: row_schema {} row without {}", where, kRowSchema, key));
  return Status::ok();
}

// Reads the whole lines of `path` from `offset` on, advancing it past them; `line` counts lines.
template <typename OnRow>
Status read_rows(const std::string& path, uint64_t& offset, int64_t& line, OnRow on_row) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fmt::format("store {}: cannot be read", path));
  in.seekg(std::streamoff(offset));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++line;
    const std::string_view l = std::string_view(text).substr(start, nl - start);
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line);
    ResultRow row = ResultRow::parse(l, nullptr, false);
    if (row.is_discarded()) row = nullptr;
    MOE_RETURN_IF_ERROR(check_row(row, where));
    on_row(std::move(row));
  }
  offset += start;
  return Status::ok();
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
  if (!std::filesystem::is_regular_file(path))
    return Status::error(fmt::format("store {}: no such file", path));
  uint64_t offset = 0;
  int64_t line = 0;
  MOE_RETURN_IF_ERROR(read_rows(path, offset, line, [&](ResultRow&& r) { rows.push_back(std::move(r)); }));
  if (rows.empty()) return Status::error(fmt::format("store {}: no rows", path));
  return Status::ok();
}

Status StoreIndex::refresh() {
  if (!std::filesystem::exists(path_)) return Status::ok();
  return read_rows(path_, offset_, lines_, [&](ResultRow&& r) {
    ids_.insert(r["run_id"].get<std::string>());
    ++rows_;
  });
}

StoreSelection parse_selection(const std::string& arg) {
  StoreSelection s{arg, arg, {}};
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || std::filesystem::exists(arg)) return s;
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
