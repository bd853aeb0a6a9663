// The research loop's reports (issue 8): compare (noise is never a win, unmatched configurations are
// listed, --by matches one baseline to many), table, plot (a real chart through gnuplot) and log (the
// seed logbooks' format, appended, never rewritten). Stores are made of rows with chosen timings, so
// no assertion depends on this machine's speed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/harness/report.h"
#include "bench/research/compare.h"
#include "bench/research/logbook.h"
#include "bench/research/plot.h"
#include "bench/research/table.h"
#include "result_rows.h"
#include "test_util.h"

namespace moe::bench {
namespace {

using testing::read_file;
using testing::run_bench;
using testing::split_lines;
using testing::store;
using testing::temp_dir;
using testing::timed_row;
using testing::tiny;

// The Markdown table rows (lines starting with "| " after the rule), split into trimmed cells.
std::vector<std::vector<std::string>> table_rows(const std::string& md) {
  std::vector<std::vector<std::string>> rows;
  bool after_rule = false;
  for (const std::string& line : split_lines(md)) {
    if (line.rfind("| ---", 0) == 0) {
      after_rule = true;
      continue;
    }
    if (!after_rule || line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) cells.push_back(cell.substr(1, cell.size() - 2));
    rows.push_back(cells);
  }
  return rows;
}

TEST(Compare, ADeltaInsideTheSpreadIsNoiseNeverAWin) {
  const std::string dir = temp_dir("compare_noise");
  const std::string base =
      store(dir + "/base.jsonl", {timed_row(tiny(1), {1.0, 1.2, 0.8}), timed_row(tiny(2), {1.0, 1.01, 0.99}),
                                  timed_row(tiny(4), {1.0})});
  const std::string fresh = store(
      dir + "/new.jsonl", {timed_row(tiny(1), {0.95, 1.15, 0.75}, "bbb"),
                           timed_row(tiny(2), {0.5, 0.51, 0.49}, "bbb"), timed_row(tiny(4), {0.5}, "bbb")});
  std::string md;
  ASSERT_TRUE(compare_markdown({base, fresh, {}, "tflops"}, md));
  const auto rows = table_rows(md);
  ASSERT_EQ(rows.size(), 3u) << md;
  EXPECT_EQ(rows[0][0], "1");
  EXPECT_EQ(rows[0].back(), "noise") << "+5 % inside a 20 % spread";
  EXPECT_EQ(rows[1].back(), "better");
  EXPECT_EQ(rows[1][3], "+100.00%") << "half the time: twice the TF/s";
  EXPECT_EQ(rows[2].back().rfind("unmeasured", 0), 0u) << "one call has no spread";
  EXPECT_NE(md.find("git_commit aaa -> bbb"), std::string::npos) << md;

  ASSERT_TRUE(compare_markdown({base, fresh, {}, "time_s"}, md));
  EXPECT_EQ(table_rows(md)[1][3], "-50.00%");
  EXPECT_EQ(table_rows(md)[1].back(), "better") << "lower time is better";
}

TEST(Compare, TreatmentIsNamedAndUnmatchedConfigurationsListed) {
  const std::string dir = temp_dir("compare_match");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1, Impl::baseline), {2, 2.1, 1.9}),
                                                 timed_row(tiny(2, Impl::baseline), {2, 2.1, 1.9}),
                                                 timed_row(tiny(1, Impl::fused_w13), {1, 1.1, 0.9}),
                                                 timed_row(tiny(4, Impl::fused_w13), {1, 1.1, 0.9})});
  std::string md;
  ASSERT_TRUE(compare_markdown({s + ":impl=baseline", s + ":impl=fused_w13", {}, "tflops"}, md));
  EXPECT_NE(md.find("Treatment (differs between the sides): impl baseline -> fused_w13"), std::string::npos)
      << md;
  ASSERT_EQ(table_rows(md).size(), 1u) << md;
  EXPECT_NE(md.find("Unmatched configurations of BASE " + s + ":impl=baseline (1):\n- topk=2"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Unmatched configurations of NEW " + s + ":impl=fused_w13 (1):\n- topk=4"),
            std::string::npos)
      << md;
}

TEST(Compare, ByMatchesOneBaselineToManyRows) {
  const std::string dir = temp_dir("compare_by");
  std::vector<ResultRow> rows;
  for (int64_t k : {2, 4})
    for (double f : {0.0, 0.5}) {
      MoeConfig c = tiny(k);
      c.null_routing.frac = f;
      rows.push_back(timed_row(c, {f == 0 ? 1.0 : 0.6, 1.01, 0.99}));
    }
  const std::string s = store(dir + "/null.jsonl", rows);
  std::string md;
  ASSERT_TRUE(compare_markdown({s + ":null_route_frac=0", s, {"topk"}, "tokens_per_s"}, md));
  const auto t = table_rows(md);
  ASSERT_EQ(t.size(), 4u) << md;
  EXPECT_EQ(t[0][0], "2");
  EXPECT_EQ(t[0][1], "0.0");
  EXPECT_EQ(t[1][1], "0.0 -> 0.5") << "the key that differs within a pair shows both values";

  const Status ambiguous = compare_markdown({s, s, {"topk"}, "tflops"}, md);
  EXPECT_NE(ambiguous.message().find("several configurations"), std::string::npos) << ambiguous.message();
}

TEST(Compare, EmptyMismatchedOrForeignInputIsAnErrorLine) {
  const std::string dir = temp_dir("compare_bad");
  const std::string a = store(dir + "/a.jsonl", {timed_row(tiny(1), {1, 1.1})});
  std::ofstream(dir + "/empty.jsonl").flush();
  std::ofstream(dir + "/rows.csv") << "distribution,mode\nrandom,full\n";
  MoeConfig other = tiny(2);
  other.hidden = 32;
  other.dtype = Dtype::f32;
  MoeConfig wider = other;
  wider.hidden = 48;
  // dtype is the treatment (one value per side); hidden differs and takes two values in NEW: no pair.
  const std::string b = store(dir + "/b.jsonl", {timed_row(other, {1, 1.1}), timed_row(wider, {1, 1.1})});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"compare " + dir + "/empty.jsonl " + a, "no rows"},
      {"compare " + a + " " + dir + "/missing.jsonl", "no such file"},
      {"compare " + dir + "/rows.csv " + a, ":1: not a jsonl results row"},
      {"compare " + a + " " + b,
       "no configuration of NEW " + b + " matches one of BASE " + a + ": they differ in hidden"},
      {"compare " + a + ":impl=nope " + a, "no row has impl=nope (impl takes fused_w13)"},
      {"compare " + a + ":colour=red " + a, "no key \"colour\""},
      {"compare " + a + " " + a + " --metric speed", "invalid metric 'speed'"},
      {"compare " + a + " " + a + " --by colour", "no key \"colour\""},
      {"compare " + a, "NEW is required"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_bench(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << " -> " << r.err;
  }
}

TEST(Table, DefaultColumnsAreTheVaryingKeysThenTheMetrics) {
  const std::string dir = temp_dir("table");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1}), timed_row(tiny(2), {1, 1.1}),
                                                 timed_row(tiny(2), {1, 1.1})});
  std::string md;
  ASSERT_TRUE(rows_table({nlohmann::ordered_json::parse(split_lines(read_file(s))[0]),
                          nlohmann::ordered_json::parse(split_lines(read_file(s))[1])},
                         {}, md));
  EXPECT_EQ(split_lines(md)[0],
            "| topk | TF/s | tokens/s | time per call (s) | % of the dense GEMM ceiling |");
  const auto r = run_bench("table " + s + " --columns topk,time_s,run_id");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(table_rows(r.out).size(), 2u) << "rows of one configuration pooled";
}

// Columns that leave two configurations alike get the keys that tell them apart in front; columns that
// tell them apart get nothing added.
TEST(Table, ColumnsThatLeaveRowsAlikeGetTheKeysThatTellThemApart) {
  const std::string dir = temp_dir("table_alike");
  MoeConfig f32 = tiny(2);
  f32.dtype = Dtype::f32;
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(2), {1, 1.1}), timed_row(f32, {2, 2.1})});
  const auto alike = run_bench("table " + s + " --columns topk,time_s");
  ASSERT_EQ(alike.exit_code, 0) << alike.err;
  EXPECT_EQ(split_lines(alike.out)[0], "| dtype | topk | time per call (s) |") << alike.out;
  const auto cells = table_rows(alike.out);
  ASSERT_EQ(cells.size(), 2u) << alike.out;
  EXPECT_EQ(cells[0][0], "bfloat16");
  EXPECT_EQ(cells[1][0], "float32");
  const auto apart = run_bench("table " + s + " --columns topk,dtype,time_s");
  ASSERT_EQ(apart.exit_code, 0) << apart.err;
  EXPECT_EQ(split_lines(apart.out)[0], "| topk | dtype | time per call (s) |") << apart.out;
}

// Runs over other rank counts (world_size is in no config's JSON) are rows of their own.
TEST(Table, RunsOverOtherRankCountsAreRowsOfTheirOwn) {
  const std::string dir = temp_dir("table_ranks");
  MoeConfig c = tiny(2);
  c.parallel_mode = ParallelMode::ep;
  bench::ResultRow two = timed_row(c, {1, 1.1}), four = timed_row(c, {2, 2.1});
  two["world_size"] = 2;
  four["world_size"] = 4;
  four["run_id"] = "0123456789abcdef";
  const std::string s = store(dir + "/s.jsonl", {two, four});
  const auto r = run_bench("table " + s + " --columns world_size,time_s");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(table_rows(r.out).size(), 2u) << r.out;
}

// The seed's DP baseline (impl ref_dp), our DP and its own routing variants are rows of their own.
TEST(Table, RefDpRowsAreNeverPooledWithOtherPaths) {
  const std::string dir = temp_dir("table_ref_dp");
  MoeConfig c = tiny(2);
  c.parallel_mode = ParallelMode::dp;
  MoeConfig ref_dp = c, renormalized = c;
  ref_dp.impl = renormalized.impl = Impl::ref_dp;
  renormalized.renormalize_topk = true;
  std::vector<ResultRow> rows = {timed_row(c, {1, 1.1}), timed_row(ref_dp, {2, 2.1}),
                                 timed_row(renormalized, {3, 3.1})};
  for (ResultRow& r : rows) r["world_size"] = 2;
  const std::string s = store(dir + "/s.jsonl", rows);
  const auto r = run_bench("table " + s + " --columns impl,renormalize_topk,time_s");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cells = table_rows(r.out);
  ASSERT_EQ(cells.size(), 3u) << r.out;
  EXPECT_EQ(cells[0][0], "fused_w13");
  EXPECT_EQ(cells[1][0], "ref_dp");
  EXPECT_EQ(cells[1][1], "false");
  EXPECT_EQ(cells[2][1], "true");
}

// moe-bench log keys runs as table does: rows over other rank counts or meshes are other runs, and
// its Config lines say which the entry holds.
TEST(Log, RunsOverOtherRankCountsAndMeshesAreNotPooled) {
  const std::string dir = temp_dir("log_ranks");
  MoeConfig c = tiny(2);
  c.parallel_mode = ParallelMode::ep;
  MoeConfig meshed = c;
  meshed.mesh_data = meshed.mesh_expert = 2;
  ResultRow two = timed_row(c, {1, 1.1}), four = timed_row(c, {2, 2.1}), mesh = timed_row(meshed, {3, 3.1});
  two["world_size"] = 2;
  four["world_size"] = 4;
  mesh["world_size"] = 4;
  for (ResultRow* r : {&two, &four}) {
    (*r)["mesh_data"] = 1;
    (*r)["mesh_expert"] = (*r)["world_size"];
  }
  mesh["mesh_data"] = mesh["mesh_expert"] = 2;
  four["run_id"] = "0123456789abcdef";
  mesh["run_id"] = "fedcba9876543210";
  const std::string s = store(dir + "/s.jsonl", {two, four, mesh});
  LogOptions o;
  o.id = "RL-MPI-001";
  o.hypothesis = "h";
  o.store = s;
  std::string entry;
  ASSERT_TRUE(log_entry(o, entry));
  EXPECT_NE(entry.find("world_size in {2, 4}"), std::string::npos) << entry;
  EXPECT_NE(entry.find("mesh_data in {1, 2}; mesh_expert in {2, 4}"), std::string::npos) << entry;
  EXPECT_EQ(table_rows(entry.substr(entry.find("- Result:"))).size(), 3u) << entry;
}

TEST(Plot, RendersAPngAndAnSvgWithErrorBars) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = temp_dir("plot");
  std::vector<ResultRow> rows;
  for (Impl impl : {Impl::baseline, Impl::fused_w13})
    for (int64_t k : {1, 2, 4})
      rows.push_back(timed_row(tiny(k, impl), {1.0 / double(k), 1.1 / double(k), 0.9}));
  const std::string s = store(dir + "/s.jsonl", rows);
  std::string script;
  ASSERT_TRUE(plot_script({s, "topk", "tflops", "impl", dir + "/c.png", "", false, false, {}}, script));
  EXPECT_NE(script.find("yerrorlines title \"impl=baseline\""), std::string::npos) << script;
  EXPECT_NE(script.find("set xlabel \"topk (K)\""), std::string::npos);
  EXPECT_NE(script.find("set ylabel \"TF/s\""), std::string::npos);
  // A peak from the rows as a dashed line (--ref), and the memory roofline's metric on the y axis.
  ASSERT_TRUE(plot_script({s, "topk", "gbps", "impl", dir + "/r.svg", "", true, true, {"time_s"}}, script));
  EXPECT_NE(script.find("set ylabel \"GB/s moved (compulsory bytes)\""), std::string::npos) << script;
  EXPECT_NE(script.find("with lines dashtype 2 linewidth 2 title \"time_s = "), std::string::npos) << script;
  EXPECT_FALSE(plot_script({s, "topk", "gbps", "impl", dir + "/r.svg", "", false, false, {"colour"}}, script));

  const auto png = run_bench("plot " + s + " --x topk --y tflops --series impl -o " + dir + "/c.png");
  ASSERT_EQ(png.exit_code, 0) << png.err;
  const std::string image = read_file(dir + "/c.png");
  EXPECT_EQ(image.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(image.size(), 10000u) << "a chart, not an empty canvas";
  const auto svg = run_bench("plot " + s + " --x impl --series topk --y time_s -o " + dir + "/c.svg");
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  const std::string text = read_file(dir + "/c.svg");
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("topk=4"), std::string::npos) << "a legend entry per series";
  EXPECT_GT(text.size(), 5000u);

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"plot " + s + " --x topk -o " + dir + "/c.png", "differ in impl"},
           {"plot " + s + " --x topk --series impl -o " + dir + "/c.gif", "expected a .png or .svg"},
           {"plot " + s + " --x colour -o " + dir + "/c.png", "no key \"colour\""}}) {
    const auto r = run_bench(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  EXPECT_EQ(read_file(dir + "/c.png"), image) << "a refused plot writes nothing";
}

TEST(Log, AppendsAnEntryInTheSeedFormatAndNeverRewrites) {
  const std::string dir = temp_dir("log");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1}), timed_row(tiny(2), {1, 1.1})});
  const std::string book = dir + "/book.md";
  const std::string earlier =
      "# MoE: Research Logbook\n\n## Experiment Log\n### 2026-02-10 10:40 - RL-CPU-000 Kickoff (confidence: "
      "exploratory)\n- Hypothesis: x\n";
  std::ofstream(book) << earlier;
  const auto r =
      run_bench("log --id RL-CPU-001 --title 'topk sweep' --hypothesis 'K doubles the work' --store " + s +
                " --logbook " + book);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_file(book);
  ASSERT_EQ(text.substr(0, earlier.size()), earlier) << "earlier entries untouched";
  const std::vector<std::string> entry = split_lines(text.substr(earlier.size()));
  ASSERT_GE(entry.size(), 12u) << text;
  EXPECT_EQ(entry[0], "");
  EXPECT_TRUE(std::regex_match(
      entry[1],
      std::regex(
          R"(### [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} - RL-CPU-001 topk sweep \(confidence: exploratory\))")))
      << entry[1];
  EXPECT_EQ(entry[2], "- Hypothesis: K doubles the work");
  EXPECT_EQ(entry[3], "- Command:");
  EXPECT_EQ(entry[4], "```bash");
  EXPECT_EQ(entry[5], "moe-bench --tokens 64 --topk 1,2");
  EXPECT_EQ(entry[6], "```");
  EXPECT_EQ(entry[7], "- Config:");
  EXPECT_NE(text.find("  - varied: `topk in {1, 2}`"), std::string::npos) << text;
  EXPECT_NE(text.find("- Result:\n\n| topk | TF/s |"), std::string::npos) << text;
  EXPECT_NE(text.find("- Interpretation: TODO\n- Next action: TODO\n"), std::string::npos);

  const std::string after_first = read_file(book);
  const auto again = run_bench("log --id RL-CPU-001 --hypothesis h --store " + s + " --logbook " + book);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("has an entry RL-CPU-001 already (entries are never rewritten): use RL-CPU-002"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(read_file(book), after_first);
  const auto bad_id = run_bench("log --id RL1 --hypothesis h --store " + s + " --logbook " + book);
  EXPECT_EQ(bad_id.exit_code, 2);
  EXPECT_NE(bad_id.err.find("expected PREFIX-NNN"), std::string::npos);
  ASSERT_EQ(run_bench("log --id RL-CPU-002 --hypothesis h --store " + s + " --logbook " + book).exit_code, 0);
  EXPECT_EQ(read_file(book).substr(0, after_first.size()), after_first);

  // Texts that would break the entry's format are refused in one line (issue 41 item 6): a line break in
  // the title wrote a heading of its own; the confidence is the seed logbooks' scale.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--hypothesis h --title \"$(printf 'a\\n### 2026-01-01 00:00 - RL-CPU-009 forged')\"",
            "--title holds a line break"},
           {"--hypothesis \"$(printf 'h\\nmore')\"", "--hypothesis holds a line break"},
           {"--hypothesis h --confidence sure", "invalid --confidence 'sure': expected exploratory"}}) {
    const std::string before = read_file(book);
    const auto bad = run_bench("log --id RL-CPU-003 --store " + s + " --logbook " + book + " " + args);
    EXPECT_EQ(bad.exit_code, 2) << args;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    EXPECT_NE(bad.err.find(message), std::string::npos) << bad.err;
    EXPECT_EQ(read_file(book), before) << "nothing appended";
  }

  const auto fresh =
      run_bench("log --id NEW-001 --hypothesis h --store " + s + " --logbook " + dir + "/new.md");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(read_file(dir + "/new.md").rfind("# Research logbook\n\n## Experiment Log\n\n### ", 0), 0u);
}

}  // namespace
}  // namespace moe::bench
