#include "bench/research/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "bench/harness/cli.h"
#include "bench/research/markdown.h"
#include "bench/research/metric.h"
#include "bench/research/store.h"
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

// How the rows of the two sides pair up.
struct Matching {
  std::vector<std::string> treatment;          // keys with one value per side, different across
  std::vector<std::string> match;              // keys a pair agrees on
  std::vector<Group> base_groups, new_groups;  // configurations (all keys), rows pooled
  std::vector<std::pair<const Group*, const Group*>> pairs;
  std::vector<const Group*> base_only, new_only;
};

Status pair_up(const CompareOptions& o, const std::vector<ResultRow>& base,
               const std::vector<ResultRow>& fresh, Matching& m) {
  const std::vector<std::string>& keys = run_keys();
  m.match = o.by;
  if (o.by.empty()) {
    for (const std::string& k : keys) {
      const std::set<std::string> a = values_of(base, k), b = values_of(fresh, k);
      if (a.size() == 1 && b.size() == 1 && a != b) m.treatment.push_back(k);
    }
    m.match = minus(keys, m.treatment);
  }
  for (const std::string& k : o.by)
    if (!base.front().contains(k))
      return Status::error(fmt::format("--by {}: the rows have no key \"{}\"", fmt::join(o.by, ","), k));

  // BASE indexed by the match keys: one configuration per match key, or the baseline is ambiguous.
  m.base_groups = group_rows(base, keys);
  m.new_groups = group_rows(fresh, keys);
  std::map<std::string, size_t> base_at;
  for (size_t i = 0; i < m.base_groups.size(); ++i) {
    auto [it, first] = base_at.emplace(match_key(*m.base_groups[i].front(), m.match), i);
    if (!first) {
      const Group both = {m.base_groups[it->second].front(), m.base_groups[i].front()};
      return Status::error(fmt::format(
          "BASE {} has several configurations with {}: they differ in {}; add those keys to --by or select "
          "one (STORE:key=value)",
          o.base, key_values(*both[0], m.match, " "), fmt::join(varying_keys(both, keys), ", ")));
    }
  }
  std::vector<bool> base_used(m.base_groups.size(), false);
  for (const Group& g : m.new_groups) {
    auto it = base_at.find(match_key(*g.front(), m.match));
    if (it == base_at.end()) {
      m.new_only.push_back(&g);
      continue;
    }
    m.pairs.emplace_back(&m.base_groups[it->second], &g);
    base_used[it->second] = true;
  }
  for (size_t i = 0; i < m.base_groups.size(); ++i)
    if (!base_used[i]) m.base_only.push_back(&m.base_groups[i]);
  return Status::ok();
}

// The table of the pairs: the keys that vary over them (a pair that differs in one shows "base -> new"),
// both values with their spread, the delta and the verdict; counts the verdicts.
Status pairs_table(const Matching& m, const Metric& metric, MarkdownTable& table,
                   std::map<std::string, int>& verdicts, std::vector<std::string>& same) {
  std::vector<const ResultRow*> paired;
  for (const auto& [b, n] : m.pairs) {
    paired.push_back(b->front());
    paired.push_back(n->front());
  }
  const std::vector<std::string> keys = minus(run_keys(), m.treatment);
  const std::vector<std::string> shown = varying_keys(paired, keys);
  same = minus(keys, shown);
  for (const std::string& k : shown) table.column(k, paired.front()->value(k, ResultRow()).is_number());
  table.column("BASE " + metric.label, true);
  table.column("NEW " + metric.label, true);
  table.column("delta", true);
  table.column("verdict", false);
  for (const auto& [b, n] : m.pairs) {
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
  return Status::ok();
}

}  // namespace

Status compare_markdown(const CompareOptions& o, std::string& markdown) {
  Metric metric;
  MOE_RETURN_IF_ERROR(find_metric(o.metric, metric));
  std::vector<ResultRow> base, fresh;
  MOE_RETURN_IF_ERROR(load_selection(parse_selection(o.base), base));
  MOE_RETURN_IF_ERROR(load_selection(parse_selection(o.fresh), fresh));
  Matching m;
  MOE_RETURN_IF_ERROR(pair_up(o, base, fresh, m));
  std::vector<const ResultRow*> all;
  for (const ResultRow& r : base) all.push_back(&r);
  for (const ResultRow& r : fresh) all.push_back(&r);
  const std::vector<std::string> differ = varying_keys(all, m.match);
  if (m.pairs.empty())
    return Status::error(
        fmt::format("no configuration of NEW {} matches one of BASE {}: they differ in {} (match on fewer "
                    "keys with --by)",
                    o.fresh, o.base, fmt::join(differ, ", ")));
  MarkdownTable table;
  std::map<std::string, int> verdicts;
  std::vector<std::string> same;
  MOE_RETURN_IF_ERROR(pairs_table(m, metric, table, verdicts, same));

  std::string md =
      !o.in_logbook ? fmt::format("### compare {}: BASE {} vs NEW {}\n\n", metric.key, o.base, o.fresh) : "";
  md += fmt::format("- Metric: {} ({} is better); {} matched pair{}", metric.label,
                    metric.higher_is_better ? "higher" : "lower", m.pairs.size(),
                    m.pairs.size() == 1 ? "" : "s");
  for (const auto& [v, count] : verdicts) md += fmt::format(", {} {}", count, v);
  md += "\n";
  if (!m.treatment.empty()) {
    std::vector<std::string> t;
    for (const std::string& k : m.treatment)
      t.push_back(fmt::format("{} {} -> {}", k, value_text(base.front()[k]), value_text(fresh.front()[k])));
    md += fmt::format("- Treatment (differs between the sides): {}\n", fmt::join(t, "; "));
  } else if (!o.by.empty()) {
    md += fmt::format("- Matched on: {}\n", fmt::join(o.by, ", "));
  }
  if (const auto env = environment_changes(base, fresh); !env.empty())
    md += fmt::format("- Build and machine: {}\n", fmt::join(env, "; "));
  if (!o.in_logbook)
    md += fmt::format("- Same in every pair: `{}`\n", key_values(*m.pairs.front().first->front(), same, " "));
  md +=
      "- Noise: a delta whose two sides' mean -/+ one stddev of the timed calls overlap is noise, never a "
      "win.\n\n";
  md += table.str();
  for (const auto& [side, groups, arg] :
       {std::tuple{"BASE", &m.base_only, &o.base}, {"NEW", &m.new_only, &o.fresh}}) {
    if (groups->empty()) continue;
    md += fmt::format("\nUnmatched configurations of {} {} ({}):\n", side, *arg, groups->size());
    for (const Group* g : *groups) md += fmt::format("- {}\n", key_values(*g->front(), differ));
  }
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
