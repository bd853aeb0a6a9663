#include "bench/research/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "bench/harness/cli.h"
#include "bench/research/markdown.h"
#include "bench/research/metric.h"
#include "bench/research/store.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

// The configuration keys, not among `cols`, that vary over `groups` where two groups agree on every
// column of `cols` that names them (a metric or a measured float tells nothing apart); none otherwise.
std::vector<std::string> keys_to_tell_apart(const std::vector<std::vector<const ResultRow*>>& groups,
                                            const std::vector<std::string>& cols) {
  std::set<std::string> seen;
  bool alike = false;
  for (const auto& g : groups) {
    std::string id;
    for (const std::string& c : cols) {
      Metric m;
      const ResultRow v = g.front()->value(c, ResultRow());
      if (!find_metric(c, m) && !v.is_number_float()) id += value_text(v) + '\x1f';
    }
    alike |= !seen.insert(id).second;
  }
  if (!alike) return {};
  std::vector<const ResultRow*> fronts;
  for (const auto& g : groups) fronts.push_back(g.front());
  std::vector<std::string> missing;
  for (const std::string& k : varying_keys(fronts, run_keys()))
    if (std::find(cols.begin(), cols.end(), k) == cols.end()) missing.push_back(k);
  return missing;
}

}  // namespace

Status rows_table(const std::vector<ResultRow>& rows, const std::vector<std::string>& columns,
                  std::string& markdown) {
  const auto groups = group_rows(rows, run_keys());
  std::vector<std::string> cols = columns;
  if (cols.empty()) {
    std::vector<const ResultRow*> all;
    for (const ResultRow& r : rows) all.push_back(&r);
    cols = varying_keys(all, run_keys());
    for (const char* m : {"tflops", "tokens_per_s", "time_s", "pct_of_ceiling"}) cols.push_back(m);
  }
  // Columns that leave two configurations looking the same (--columns tokens,tflops over a store that
  // also varies the dtype) would print rows a reader cannot tell apart: the keys that tell them apart
  // lead the table then.
  if (const std::vector<std::string> missing = keys_to_tell_apart(groups, cols); !missing.empty())
    cols.insert(cols.begin(), missing.begin(), missing.end());
  // A column some rows lack (check_pass in a store of --check and plain rows) is an empty cell there;
  // one no row has is a mistyped key.
  MarkdownTable table;
  for (const std::string& c : cols) {
    const auto has =
        std::find_if(rows.begin(), rows.end(), [&](const ResultRow& r) { return r.contains(c); });
    if (has == rows.end()) return Status::error(fmt::format("--columns: the rows have no key \"{}\"", c));
    Metric m;
    table.column(find_metric(c, m) ? m.label : c, (*has)[c].is_number());
  }
  for (const auto& g : groups) {
    std::vector<std::string> cells;
    for (const std::string& c : cols) {
      Metric m;
      Spread s;
      const auto v = g.front()->find(c);
      if (v == g.front()->end())
        cells.emplace_back();
      else if (find_metric(c, m) && v->is_number() && pooled_metric(g, m, s))
        cells.push_back(spread_text(s));
      else
        cells.push_back(v->is_number_float() ? format_number(v->get<double>()) : value_text(*v));
    }
    table.rows.push_back(std::move(cells));
  }
  markdown = table.str();
  return Status::ok();
}

int table_main(int argc, char** argv) {
  CLI::App app{
      "moe-bench table: the rows of a result store (jsonl; STORE:key=value,... selects) as a Markdown "
      "table, rows of one configuration pooled"};
  std::string store, columns;
  app.add_option("STORE", store, "the store (STORE or STORE:key=value,...)")->required();
  app.add_option("--columns", columns,
                 "comma list of row keys (default: the configuration keys that vary, then the metrics)");
  bool exit_ok = false;
  if (Status s = parse_cli(app, argc, argv, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  std::vector<ResultRow> rows;
  if (Status s = load_selection(parse_selection(store), rows); !s) return fail(s);
  std::vector<std::string> cols;
  for (std::string_view c : list_items(columns)) cols.emplace_back(c);
  std::string md;
  if (Status s = rows_table(rows, cols, md); !s) return fail(s);
  fmt::print("{}", md);
  return 0;
}

}  // namespace moe::bench
