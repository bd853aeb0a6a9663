#include "bench/research/logbook.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>

#include "bench/harness/cli.h"
#include "bench/research/compare.h"
#include "bench/research/store.h"
#include "bench/research/table.h"
#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

std::string now_local() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// "- Config:" lines: what every row shares, what the sweep varied, and where it ran.
// `rows`: BASE's rows (if any) then NEW's; `stores` names them.
std::string config_lines(const std::vector<ResultRow>& rows, const std::string& stores) {
  std::vector<const ResultRow*> all;
  for (const ResultRow& r : rows) all.push_back(&r);
  // run_keys, not config_keys: rows of other rank counts or meshes are other runs (the table below
  // groups by them too), and the entry must say which it holds.
  const std::vector<std::string> varied = varying_keys(all, run_keys());
  std::vector<std::string> fixed;
  for (const std::string& k : run_keys()) {
    // A key no row has (world_size in rows of one process made before it existed) says nothing.
    const bool any = std::any_of(all.begin(), all.end(), [&](const ResultRow* r) { return r->contains(k); });
    if (any && std::find(varied.begin(), varied.end(), k) == varied.end()) fixed.push_back(k);
  }
  std::string s = fmt::format("  - fixed: `{}`\n", key_values(rows.front(), fixed));
  if (!varied.empty()) {
    std::vector<std::string> axes;
    for (const std::string& k : varied) {
      std::vector<std::string> values;
      for (const ResultRow* r : all) {
        const std::string v = value_text(r->value(k, ResultRow()));
        if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
      }
      axes.push_back(fmt::format("{} in {{{}}}", k, fmt::join(values, ", ")));
    }
    s += fmt::format("  - varied: `{}`\n", fmt::join(axes, "; "));
  }
  std::vector<std::string> machine;
  for (const char* k :
       {"cpu_model", "cpu_id", "isa", "threads", "gemm_library", "git_commit", "moe_version"}) {
    std::set<std::string> values;
    for (const ResultRow* r : all) values.insert(value_text(r->value(k, ResultRow())));
    machine.push_back(fmt::format("{}={}", k, fmt::join(values, ",")));
  }
  s += fmt::format("  - machine: `{}`\n", fmt::join(machine, " "));
  s += fmt::format("  - rows: {} ({} row{})\n", stores, rows.size(), rows.size() == 1 ? "" : "s");
  return s;
}

bool alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

// PREFIX-NNN: a letter, then letters, digits and single dashes, then a dash and at least three
// digits. Matched by hand rather than by std::regex, whose recursion grows with the text matched (a
// long logbook line overflows the stack).
bool is_id(std::string_view id) {
  const size_t dash = id.rfind('-');
  if (id.empty() || !std::isalpha(static_cast<unsigned char>(id[0])) || dash == std::string_view::npos ||
      id.size() - dash - 1 < 3)
    return false;
  for (size_t i = dash + 1; i < id.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(id[i]))) return false;
  for (size_t i = 0; i < dash; ++i)
    if (!alnum(id[i]) && !(id[i] == '-' && alnum(id[i + 1]) && alnum(id[i - 1]))) return false;
  return true;
}

Status check_id(const std::string& id) {
  if (!is_id(id))
    return Status::error(fmt::format("invalid --id '{}': expected PREFIX-NNN, e.g. MOE-CPU-001", id));
  return Status::ok();
}

// The ID of an entry heading, "### DATE - ID[ title]...": the longest PREFIX-NNN after the first " - "
// that has one, ending at a word boundary; empty for any other line.
std::string_view heading_id(std::string_view line) {
  if (line.rfind("### ", 0) != 0) return {};
  for (size_t at = line.find(" - ", 4); at != std::string_view::npos; at = line.find(" - ", at + 1)) {
    const size_t begin = at + 3;
    size_t end = begin;
    while (end < line.size() && (alnum(line[end]) || line[end] == '-')) ++end;
    for (size_t e = end; e > begin; --e) {
      // The ID ends at a word boundary: inside the run only before a dash, at its end unless a '_' follows.
      const bool boundary = e < end ? line[e] == '-' : e == line.size() || line[e] != '_';
      if (boundary && is_id(line.substr(begin, e - begin))) return line.substr(begin, e - begin);
    }
  }
  return {};
}

}  // namespace

// The free texts that land in the entry: one line each (a line break in --title wrote a heading of its own,
// which a later --id then met as a duplicate), and a confidence from the seed logbooks' scale.
Status check_entry_texts(const LogOptions& o) {
  for (const auto& [flag, text] :
       {std::pair<const char*, const std::string&>{"--title", o.title}, {"--hypothesis", o.hypothesis}})
    if (text.find_first_of("\r\n") != std::string::npos)
      return Status::error(fmt::format("{} holds a line break: a logbook entry's {} is one line", flag,
                                       flag == std::string("--title") ? "heading" : "hypothesis"));
  for (const char* level : {"exploratory", "replicated", "actionable", "operational"})
    if (o.confidence == level) return Status::ok();
  return Status::error(
      fmt::format("invalid --confidence '{}': expected exploratory, replicated, actionable or operational",
                  o.confidence));
}

Status log_entry(const LogOptions& o, std::string& entry) {
  MOE_RETURN_IF_ERROR(check_id(o.id));
  if (o.hypothesis.empty()) return Status::error("--hypothesis is empty: say what the experiment tests");
  MOE_RETURN_IF_ERROR(check_entry_texts(o));
  std::vector<ResultRow> rows;
  MOE_RETURN_IF_ERROR(load_selection(parse_selection(o.store), rows));
  std::vector<ResultRow> base_rows;
  if (!o.base.empty()) MOE_RETURN_IF_ERROR(load_selection(parse_selection(o.base), base_rows));
  // The commands that made the rows, BASE's first, each once.
  std::vector<std::string> commands;
  for (const std::vector<ResultRow>* side : {&base_rows, &rows})
    for (const ResultRow& r : *side) {
      const std::string c = value_text(r.value("command", ResultRow("")));
      if (!c.empty() && std::find(commands.begin(), commands.end(), c) == commands.end())
        commands.push_back(c);
    }
  std::string result;
  if (o.base.empty()) {
    MOE_RETURN_IF_ERROR(rows_table(rows, {}, result));
  } else {
    CompareOptions c;
    c.base = o.base;
    c.fresh = o.store;
    c.metric = o.metric;
    c.in_logbook = true;
    MOE_RETURN_IF_ERROR(compare_markdown(c, result));
  }
  entry = fmt::format("### {} - {}{} (confidence: {})\n", o.date.empty() ? now_local() : o.date, o.id,
                      o.title.empty() ? "" : " " + o.title, o.confidence);
  entry += fmt::format("- Hypothesis: {}\n", o.hypothesis);
  entry += fmt::format("- Command:\n```bash\n{}\n```\n", fmt::join(commands, "\n"));
  std::vector<ResultRow> all = base_rows;
  all.insert(all.end(), rows.begin(), rows.end());
  entry += "- Config:\n" + config_lines(all, o.base.empty() ? fmt::format("`{}`", o.store)
                                                            : fmt::format("`{}` and `{}`", o.base, o.store));
  entry += "- Result:\n\n" + result + "\n";
  entry += "- Interpretation: TODO\n- Next action: TODO\n";
  return Status::ok();
}

Status append_log_entry(const LogOptions& o, const std::string& entry) {
  std::string existing;
  if (Status s = read_regular_file(o.logbook, 0, existing, "logbook"); !s) {
    std::error_code ec;
    if (std::filesystem::exists(o.logbook, ec) || ec) return s;  // a new logbook starts empty
  }
  // The ID must be new: an entry is never rewritten, and a second one of the same ID would be ambiguous.
  const size_t dash = o.id.rfind('-');
  const std::string prefix = o.id.substr(0, dash + 1);
  int64_t next = 0;
  bool taken = false;
  std::istringstream lines(existing);
  for (std::string line; std::getline(lines, line);) {
    const std::string id(heading_id(line));
    if (id.empty()) continue;
    taken |= id == o.id;
    // A number past int64 suggests no next ID (the clash check above is what matters).
    int64_t n = 0;
    if (id.rfind(prefix, 0) == 0 && parse_int("", id.substr(prefix.size()), 0, INT64_MAX - 1, n))
      next = std::max(next, n + 1);
  }
  if (taken)
    return Status::error(
        fmt::format("logbook {} has an entry {} already (entries are never rewritten): use {}{:03d}",
                    o.logbook, o.id, prefix, next));
  std::vector<std::string> out;
  if (existing.find_first_not_of(" \n\t") == std::string::npos)
    out = {"# Research logbook", "", "## Experiment Log"};
  out.push_back("");
  std::istringstream e(entry);
  for (std::string line; std::getline(e, line);) out.push_back(line);
  return append_lines(o.logbook, "", out, "logbook");
}

int log_main(int argc, char** argv) {
  LogOptions o;
  CLI::App app{"moe-bench log: a logbook entry (the seed logbooks' format) from a result store"};
  app.add_option("--id", o.id, "experiment ID, PREFIX-NNN (e.g. MOE-CPU-003)")->required();
  app.add_option("--hypothesis", o.hypothesis, "what the experiment tests")->required();
  app.add_option("--store", o.store, "the rows (STORE or STORE:key=value,...)")->required();
  app.add_option("--logbook", o.logbook, "append the entry to this Markdown file (default: print it)");
  app.add_option("--title", o.title, "short title after the ID");
  app.add_option("--confidence", o.confidence, "exploratory|replicated|actionable|operational")
      ->capture_default_str();
  app.add_option("--base", o.base, "a baseline store: the result is the compare table against it");
  app.add_option("--metric", o.metric, "with --base: tflops|tokens_per_s|time_s|pct_of_ceiling")
      ->capture_default_str();
  bool exit_ok = false;
  if (Status s = parse_cli(app, argc, argv, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  std::string entry;
  if (Status s = log_entry(o, entry); !s) return fail(s);
  if (o.logbook.empty()) {
    fmt::print("{}", entry);
    return 0;
  }
  if (Status s = append_log_entry(o, entry); !s) return fail(s);
  fmt::print(stderr, "moe-bench: appended {} to {}\n", o.id, o.logbook);
  return 0;
}

}  // namespace moe::bench
