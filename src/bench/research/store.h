// Results stores: the jsonl files --out appends rows to (report.h make_row, one row per line), read back
// by the research tools: sweep resume, compare, plot, log and table.
//
// A store is read whole and checked row by row: every line must be a JSON object of this build's row
// schema (run_id.h kRowSchema), so a csv file, a store written before row_schema existed or by a newer
// moe-bench is refused with one line naming the file and line, never misread. A last line without its
// '\n' is read when it parses (a whole row whose newline was lost); one that does not is a row being
// written (or a writer that died mid-row, which the next append cuts off) and is skipped.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/harness/report.h"
#include "moe/status.h"

namespace moe::bench {

// The rows of the store at `path`; an empty store is an error (`what` names the store's role).
Status read_store(const std::string& path, std::vector<ResultRow>& rows);

// The run_ids of a store that other processes may be appending to (a resumed sweep): refresh() reads
// the rows appended since the last refresh. A missing file is an empty store.
class StoreIndex {
 public:
  explicit StoreIndex(std::string path) : path_(std::move(path)) {}
  Status refresh();
  bool contains(const std::string& run_id) const { return ids_.count(run_id) > 0 || run_id == tail_id_; }
  size_t rows() const { return rows_ + (tail_id_.empty() ? 0 : 1); }

 private:
  std::string path_;
  uint64_t offset_ = 0;  // bytes of whole lines read so far
  int64_t lines_ = 0;
  size_t rows_ = 0;
  std::set<std::string> ids_;
  std::string tail_id_;  // the unterminated last row's, read again by the next refresh
};

// A store argument: PATH, or PATH:KEY=VALUE[,KEY=VALUE...] for the rows whose KEY has that VALUE
// (numbers compare as numbers: null_route_frac=0 matches 0.0). The selection follows the last ':'.
struct StoreSelection {
  std::string arg;  // as given, for messages and tables
  std::string path;
  std::vector<std::pair<std::string, std::string>> where;
};
StoreSelection parse_selection(const std::string& arg);
// The selected rows; an empty store, an unknown key or a selection that leaves no row is an error.
Status load_selection(const StoreSelection& s, std::vector<ResultRow>& rows);

// The keys that say what a row measured: MoeConfig's and KernelConfig's fields, the queue mode and the
// timing protocol (iters, warmup, repeats), in that order.
const std::vector<std::string>& config_keys();
// config_keys and the keys a row's config JSON holds only where given (the mesh, ep_overlap, ref_dp's
// renormalize_topk) or not at all (world_size): what table, compare, plot and log group rows by, so
// that runs over different rank counts or meshes are never one group (a row without one reads null
// there).
const std::vector<std::string>& run_keys();
// The environment keys (build, machine, date) of a row.
const std::vector<std::string>& environment_keys();

// A row value as text: strings bare, numbers and booleans as JSON writes them, null as "none".
std::string value_text(const nlohmann::ordered_json& v);
// Those of `keys` that take more than one value over `rows`.
std::vector<std::string> varying_keys(const std::vector<const ResultRow*>& rows,
                                      const std::vector<std::string>& keys);
// "key=value key=value" for `keys` of `row`.
std::string key_values(const ResultRow& row, const std::vector<std::string>& keys,
                       std::string_view sep = " ");

}  // namespace moe::bench

namespace moe::bench {

// `rows` grouped by their values of `keys`, groups in order of first appearance.
std::vector<std::vector<const ResultRow*>> group_rows(const std::vector<ResultRow>& rows,
                                                      const std::vector<std::string>& keys);

}  // namespace moe::bench
