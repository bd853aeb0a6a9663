#include "bench/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "bench/cli.h"
#include "bench/markdown.h"
#include "bench/metric.h"
#include "bench/store.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

using Group = std::vector<const ResultRow*>;

std::set<std::string> values_of(const std::vector<ResultRow>& rows, const std::string& key) {
  std::set<std::string> values;
  for (const ResultRow& r : rows) values.insert(value_text(r.value(key, ResultRow())));
  return values;
}

std::string match_key(const ResultRow& r, const std::vector<std::string>& keys) {
  ResultRow k = ResultRow::array();
  for (const std::string& key : keys) k.push_back(r.value(key, ResultRow()));
  return k.dump();
}

std::vector<std::string> minus(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const std::string& k : a)
    if (std::find(b.begin(), b.end(), k) == b.end()) out.push_back(k);
  return out;
}

std::string verdict(const Metric& m, const Spread& base, const Spread& fresh) {
  if (!base.measured() || !fresh.measured()) return "unmeasured (a side has < 2 timed calls)";
  if (overlaps(base, fresh)) return "noise";
  return (fresh.value > base.value) == m.higher_is_better ? "better" : "worse";
}

// Keys of the environment (build, machine) that differ between the sides, "key: a -> b".
std::vector<std::string> environment_changes(const std::vector<ResultRow>& base,
                                             const std::vector<ResultRow>& fresh) {
  std::vector<std::string> changes;
  for (const std::string& k : environment_keys()) {
    if (k == "date" || std::find(config_keys().begin(), config_keys().end(), k) != config_keys().end())
      continue;
    const std::set<std::string> a = values_of(base, k), b = values_of(fresh, k);
    if (a != b) changes.push_back(fmt::format("{} {} -> {}", k, fmt::join(a, ","), fmt::join(b, ",")));
  }
  return changes;
}

}  // namespace

Status compare_markdown(const CompareOptions& o, std::string& markdown) {
  Metric metric;
  MOE_RETURN_IF_ERROR(find_metric(o.metric, metric));
  const StoreSelection base_sel = parse_selection(o.base), new_sel = parse_selection(o.fresh);
  std::vector<ResultRow> base, fresh;
  MOE_RETURN_IF_ERROR(load_selection(base_sel, base));
  MOE_RETURN_IF_ERROR(load_selection(new_sel, fresh));
  const std::vector<std::string>& keys = config_keys();

  std::vector<std::string> treatment, match = o.by;
  if (o.by.empty()) {
    for (const std::string& k : keys) {
      const std::set<std::string> a = values_of(base, k), b = values_of(fresh, k);
      if (a.size() == 1 && b.size() == 1 && a != b) treatment.push_back(k);
    }
    match = minus(keys, treatment);
  } else {
    for (const std::string& k : o.by)
      if (!base.front().contains(k))
        return Status::error(fmt::format("--by {}: the rows have no key \"{}\"", fmt::join(o.by, ","), k));
  }

  // Configurations (all keys) pooled, then BASE's indexed by the match keys: one per match key.
  const std::vector<Group> base_groups = group_rows(base, keys), new_groups = group_rows(fresh, keys);
  std::map<std::string, size_t> base_at;
  for (size_t i = 0; i < base_groups.size(); ++i) {
    auto [it, fresh_key] = base_at.emplace(match_key(*base_groups[i].front(), match), i);
    if (!fresh_key) {
      const Group both = {base_groups[it->second].front(), base_groups[i].front()};
      return Status::error(fmt::format(
          "BASE {} has several configurations with {}: they differ in {}; add those keys to --by or select "
          "one (STORE:key=value)",
          o.base, key_values(*both[0], match, " "), fmt::join(varying_keys(both, keys), ", ")));
    }
  }
  std::vector<std::pair<const Group*, const Group*>> pairs;
  std::vector<bool> base_used(base_groups.size(), false);
  std::vector<const Group*> new_only;
  for (const Group& g : new_groups) {
    auto it = base_at.find(match_key(*g.front(), match));
    if (it == base_at.end()) {
      new_only.push_back(&g);
      continue;
    }
    pairs.emplace_back(&base_groups[it->second], &g);
    base_used[it->second] = true;
  }
  std::vector<const ResultRow*> all;
  for (const ResultRow& r : base) all.push_back(&r);
  for (const ResultRow& r : fresh) all.push_back(&r);
  if (pairs.empty()) {
    return Status::error(
        fmt::format("no configuration of NEW {} matches one of BASE {}: they differ in {} (match on fewer "
                    "keys with --by)",
                    o.fresh, o.base, fmt::join(varying_keys(all, match), ", ")));
  }

  // Columns: the keys that vary over the pairs (a pair that differs in one shows "base -> new").
  std::vector<const ResultRow*> paired;
  for (const auto& [b, n] : pairs) {
    paired.push_back(b->front());
    paired.push_back(n->front());
  }
  const std::vector<std::string> shown = varying_keys(paired, minus(keys, treatment));
  const std::vector<std::string> same = minus(minus(keys, treatment), shown);

  MarkdownTable table;
  for (const std::string& k : shown) table.column(k, paired.front()->value(k, ResultRow()).is_number());
  table.column("BASE " + metric.label, true);
  table.column("NEW " + metric.label, true);
  table.column("delta", true);
  table.column("verdict", false);
  std::map<std::string, int> verdicts;
  for (const auto& [b, n] : pairs) {
    Spread sb, sn;
    MOE_RETURN_IF_ERROR(pooled_metric(*b, metric, sb));
    MOE_RETURN_IF_ERROR(pooled_metric(*n, metric, sn));
    std::vector<std::string> cells;
    for (const std::string& k : shown) {
      const std::string bv = value_text(b->front()->value(k, ResultRow())),
                        nv = value_text(n->front()->value(k, ResultRow()));
      cells.push_back(bv == nv ? nv : bv + " -> " + nv);
    }
    const std::string v = verdict(metric, sb, sn);
    ++verdicts[v.substr(0, v.find(' '))];
    cells.push_back(spread_text(sb));
    cells.push_back(spread_text(sn));
    cells.push_back(fmt::format("{:+.2f}%", 100.0 * (sn.value - sb.value) / sb.value));
    cells.push_back(v);
    table.rows.push_back(std::move(cells));
  }

  std::string md =
      !o.in_logbook ? fmt::format("### compare {}: BASE {} vs NEW {}\n\n", metric.key, o.base, o.fresh) : "";
  md += fmt::format("- Metric: {} ({} is better); {} matched pair{}", metric.label,
                    metric.higher_is_better ? "higher" : "lower", pairs.size(), pairs.size() == 1 ? "" : "s");
  for (const auto& [v, count] : verdicts) md += fmt::format(", {} {}", count, v);
  md += "\n";
  if (!treatment.empty()) {
    std::vector<std::string> t;
    for (const std::string& k : treatment)
      t.push_back(fmt::format("{} {} -> {}", k, value_text(base.front()[k]), value_text(fresh.front()[k])));
    md += fmt::format("- Treatment (differs between the sides): {}\n", fmt::join(t, "; "));
  } else if (!o.by.empty()) {
    md += fmt::format("- Matched on: {}\n", fmt::join(o.by, ", "));
  }
  if (const auto env = environment_changes(base, fresh); !env.empty())
    md += fmt::format("- Build and machine: {}\n", fmt::join(env, "; "));
  if (!o.in_logbook)
    md += fmt::format("- Same in every pair: `{}`\n", key_values(*paired.front(), same, " "));
  md +=
      "- Noise: a delta whose two sides' mean -/+ one stddev of the timed calls overlap is noise, never a "
      "win.\n\n";
  md += table.str();
  auto list_unmatched = [&](const char* side, const std::vector<const Group*>& groups,
                            const std::string& arg) {
    if (groups.empty()) return;
    md += fmt::format("\nUnmatched configurations of {} {} ({}):\n", side, arg, groups.size());
    const std::vector<std::string> differ = varying_keys(all, match);
    for (const Group* g : groups) md += fmt::format("- {}\n", key_values(*g->front(), differ));
  };
  std::vector<const Group*> base_only;
  for (size_t i = 0; i < base_groups.size(); ++i)
    if (!base_used[i]) base_only.push_back(&base_groups[i]);
  list_unmatched("BASE", base_only, o.base);
  list_unmatched("NEW", new_only, o.fresh);
  markdown = md;
  return Status::ok();
}

int compare_main(int argc, char** argv) {
  CompareOptions o;
  CLI::App app{
      "moe-bench compare: a Markdown A/B table of two result stores (jsonl) or selections of one "
      "(STORE:key=value,...), with deltas marked noise where the two sides' spreads overlap"};
  app.add_option("BASE", o.base, "the baseline store (STORE or STORE:key=value,...)")->required();
  app.add_option("NEW", o.fresh, "the store to compare with it")->required();
  std::string by;
  app.add_option("--by", by,
                 "comma list of keys to match rows on (default: every configuration key but those "
                 "that differ between the sides)");
  app.add_option("--metric", o.metric, "tflops|tokens_per_s|time_s|pct_of_ceiling")->capture_default_str();
  bool exit_ok = false;
  if (Status s = parse_cli(app, argc, argv, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  for (std::string_view k : list_items(by)) o.by.emplace_back(k);
  std::string md;
  if (Status s = compare_markdown(o, md); !s) return fail(s);
  fmt::print("{}", md);
  return 0;
}

}  // namespace moe::bench
