// The files a user hands the research tools (issue 19): result stores, logbooks and plans are read
// without a crash and without a lost line. An append never deletes a line that is whole; a reader
// answers one line naming the file, row and key (exit 2) or shows a missing cell as empty.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "bench/research/plan.h"
#include "bench/research/store.h"
#include "result_rows.h"
#include "test_util.h"

namespace moe::bench {
namespace {

using namespace moe::testing;  // test_util.h and result_rows.h

// The store's text with its final '\n' taken off: a last row a user's editor left unterminated.
std::string unterminated(const std::string& path) {
  std::string text = read_file(path);
  text.pop_back();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return text;
}

const char* kRun =
    "--tokens 16 --hidden 16 --mlp-dim 8 --experts 4 --topk 1 --iters 1 --warmup 0 --threads 1 "
    "--dtype float32 --impl fast --distribution random --queue-mode full --format jsonl";

TEST(Stores, AWholeLastRowWithoutItsNewlineIsReadAndKept) {
  const std::string dir = temp_dir("stores_unterminated");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1}), timed_row(tiny(2), {1, 1.1})});
  const std::string before = unterminated(s);
  std::vector<ResultRow> rows;
  ASSERT_TRUE(read_store(s, rows));
  EXPECT_EQ(rows.size(), 2u) << "the last row is whole: it parses";
  StoreIndex index(s);
  ASSERT_TRUE(index.refresh());
  EXPECT_EQ(index.rows(), 2u);
  EXPECT_TRUE(index.contains(rows.back()["run_id"].get<std::string>()));

  const auto table = run_bench("table " + s + " --columns topk");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(split_lines(table.out).size(), 4u) << "head, rule and both rows\n" << table.out;

  const auto r = run_bench(std::string(kRun) + " --out " + s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("removed"), std::string::npos) << r.err;
  const std::string after = read_file(s);
  ASSERT_EQ(after.substr(0, before.size() + 1), before + "\n") << "the row is kept and ended";
  EXPECT_EQ(split_lines(after).size(), 3u);
  ASSERT_TRUE(index.refresh());
  EXPECT_EQ(index.rows(), 3u) << "the row read unterminated is counted once";
}

// Rows written before the environment gained cpu_extensions (docs/results' stores) or the config
// cuda_gemm_streams (a build before the cuda backend, such as an A/B's base) still read: the keys read
// "unknown" and the default; a row without an older key is still refused.
TEST(Stores, RowsOlderThanAKeyAddedWithinTheSchemaStillRead) {
  const std::string dir = temp_dir("stores_older_rows");
  ResultRow older = timed_row(tiny(1), {1, 1.1});
  older.erase("cpu_extensions");
  older.erase("cuda_gemm_streams");
  const std::string s = store(dir + "/s.jsonl", {older, timed_row(tiny(1), {1.2, 1.3})});
  std::vector<ResultRow> rows;
  ASSERT_TRUE(read_store(s, rows));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["cpu_extensions"], "unknown");
  EXPECT_EQ(rows[0]["cuda_gemm_streams"], KernelConfig{}.cuda_gemm_streams);
  const auto one = run_bench("table " + s + " --columns topk,time_s");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(split_lines(one.out).size(), 3u) << "the older row and the newer one are one configuration\n"
                                             << one.out;
  const auto table = run_bench("table " + s + " --columns topk,cpu_extensions");
  EXPECT_EQ(table.exit_code, 0) << table.err;
  ResultRow without_isa = timed_row(tiny(2), {1, 1.1});
  without_isa.erase("isa");
  const std::string bad = store(dir + "/bad.jsonl", {without_isa});
  EXPECT_FALSE(read_store(bad, rows));
}

TEST(Stores, OnlyARowThatDoesNotParseIsTorn) {
  const std::string dir = temp_dir("stores_torn");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1})});
  const std::string whole = read_file(s);
  std::ofstream(s, std::ios::app) << whole.substr(0, whole.size() / 2);
  std::vector<ResultRow> rows;
  ASSERT_TRUE(read_store(s, rows));
  EXPECT_EQ(rows.size(), 1u) << "a row being written is not read";
  const auto r = run_bench(std::string(kRun) + " --out " + s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("removed a partial last row"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(s).substr(0, whole.size()), whole);
  EXPECT_EQ(split_lines(read_file(s)).size(), 2u);

  // csv: a row with the header's number of fields is whole.
  const std::string csv = dir + "/r.csv";
  ASSERT_EQ(run_bench(std::string(kRun) + " --format csv --out " + csv).exit_code, 0);
  const std::string csv_text = unterminated(csv);
  ASSERT_EQ(run_bench(std::string(kRun) + " --format csv --out " + csv).exit_code, 0);
  EXPECT_EQ(read_file(csv).substr(0, csv_text.size() + 1), csv_text + "\n");
  EXPECT_EQ(split_lines(read_file(csv)).size(), 3u);
}

TEST(Stores, ALogbookIsNeverCutOnlyAppendedToAfterANewline) {
  const std::string dir = temp_dir("stores_logbook");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1})});
  const std::string book = dir + "/book.md";
  const std::string mine = "# My logbook\n\nnotes I typed without a final newline: keep them";
  std::ofstream(book) << mine;
  const auto r = run_bench("log --id RL-CPU-001 --hypothesis h --store " + s + " --logbook " + book);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("removed"), std::string::npos) << r.err;
  const std::string text = read_file(book);
  ASSERT_EQ(text.substr(0, mine.size() + 1), mine + "\n") << text;
  EXPECT_NE(text.find("RL-CPU-001"), std::string::npos);
}

// One line on stderr, exit 2, nothing on stdout, naming each of `names`.
void expect_one_line(const testing::Ran& r, const std::string& args, const std::vector<std::string>& names) {
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(split_lines(r.err).size(), 1u) << args << "\n" << r.err;
  for (const std::string& n : names) EXPECT_NE(r.err.find(n), std::string::npos) << args << " -> " << r.err;
}

TEST(Stores, ARowOfTheWrongShapeIsOneLineNamingFileRowAndKey) {
  const std::string dir = temp_dir("stores_types");
  const ResultRow good = timed_row(tiny(1), {1, 1.1});
  auto with = [&](const std::string& key, const ResultRow& value) {
    ResultRow r = good;
    r[key] = value;
    return r;
  };
  ResultRow no_topk = good;
  no_topk.erase("topk");
  const std::vector<std::pair<ResultRow, std::string>> bad = {
      {with("samples_s", ResultRow::array()), "samples_s"},
      {with("samples_s", ResultRow::parse("[[]]")), "samples_s"},
      {with("samples_s", ResultRow::parse("[[1, \"x\"]]")), "samples_s"},
      {with("samples_s", ResultRow::parse("[1, 2]")), "samples_s"},
      {with("samples_s", ResultRow::parse("[[0, 0, 0]]")), "samples_s"},  // issue 41 item 4: no call is free
      {with("time_s", "fast"), "time_s"},
      {with("time_s", -1.0), "time_s"},
      {with("time_stddev_s", ResultRow::array()), "time_stddev_s"},
      {with("tflops", "many"), "tflops"},
      {with("tokens_per_s", ResultRow::object()), "tokens_per_s"},
      {with("run_id", 5), "run_id"},
      {no_topk, "topk"},
  };
  int n = 0;
  for (const auto& [row, key] : bad) {
    const std::string s = store(dir + "/s" + std::to_string(n++) + ".jsonl", {good, row});
    for (const std::string& cmd :
         {"table " + s, "compare " + s + " " + s, "plot " + s + " --x topk -o " + dir + "/c.png"})
      expect_one_line(run_bench(cmd), cmd, {s + ":2", "\"" + key + "\""});
  }
  // A number JSON cannot hold in a double is no row either.
  const std::string huge = dir + "/huge.jsonl";
  std::string text = good.dump();
  text.replace(text.find("\"time_s\":") + 9, 1, "1e400,\"x\":");
  std::ofstream(huge) << text << "\n";
  expect_one_line(run_bench("table " + huge), "table " + huge, {huge + ":1"});
  // A value nested 100,000 levels deep (issue 41 item 3: every reader died of a stack overflow).
  const std::string deep = dir + "/deep.jsonl";
  std::string deep_row = good.dump();
  deep_row.insert(deep_row.size() - 1, ",\"x\":" + std::string(100000, '[') + std::string(100000, ']'));
  std::ofstream(deep) << good.dump() << "\n" << deep_row << "\n";
  for (const std::string& cmd :
       {"table " + deep, "compare " + deep + " " + deep, "plot " + deep + " --x topk -o " + dir + "/d.png",
        "log --id DP-CPU-001 --hypothesis h --store " + deep + " --logbook " + dir + "/b.md"})
    expect_one_line(run_bench(cmd), cmd, {deep + ":2", "nested deeper than 256 levels"});
}

TEST(Stores, AColumnSomeRowsLackIsAnEmptyCell) {
  const std::string dir = temp_dir("stores_columns");
  ResultRow checked = timed_row(tiny(2), {1, 1.1});
  add_check_fields(checked, ConditionedCheck{});
  for (const auto& order : {std::vector<ResultRow>{timed_row(tiny(1), {1, 1.1}), checked},
                            std::vector<ResultRow>{checked, timed_row(tiny(1), {1, 1.1})}}) {
    const std::string s =
        store(dir + "/s" + std::to_string(order.front().contains("check_pass")) + ".jsonl", order);
    const auto r = run_bench("table " + s + " --columns topk,check_pass");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<std::string> lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 4u) << r.out;
    for (size_t i = 2; i < 4; ++i) {
      const bool has =
          lines[i].find("| 2 ") != std::string::npos || lines[i].find(" 2 |") != std::string::npos;
      EXPECT_EQ(lines[i].find("false") != std::string::npos, has) << r.out;
      EXPECT_EQ(lines[i].find("none"), std::string::npos) << "a missing cell is empty\n" << r.out;
    }
    expect_one_line(run_bench("table " + s + " --columns topk,colour"), "colour", {"no key \"colour\""});
  }
}

TEST(Stores, PlansRefuseDuplicateKeysAndNumbersOutOfRange) {
  const std::string dir = temp_dir("stores_plans");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"fixed": {"tokens": 1e400}})", "not JSON"},
      {R"({"fixed": {"tokens": 1, "tokens": 2}})", "duplicate key \"tokens\""},
      {R"({"fixed": {"tokens": 1}, "fixed": {"hidden": 2}})", "duplicate key \"fixed\""},
      {R"({"axes": {"topk": [1, 2]}, "fixed": {"seed": 1}, "axes": {"impl": ["fast"]}})", "duplicate key"},
      {R"({"fixed": {"tokens": 1e300}})", "tokens"},
      {R"({"fixed": {"tokens": -0.0}})", "tokens"},
  };
  for (const auto& [json, message] : bad) {
    const std::string p = dir + "/p.json";
    std::ofstream(p, std::ios::trunc) << json;
    const std::string cmd = "sweep --plan " + p + " --out " + dir + "/s.jsonl";
    expect_one_line(run_bench(cmd), json, {message});
  }
  std::vector<std::string> args;
  std::ofstream(dir + "/ok.json") << R"({"fixed": {"tokens": 8}, "axes": {"topk": [1]}, "repeats": 1})";
  EXPECT_TRUE(plan_args(dir + "/ok.json", args)) << "the same key in two objects is no duplicate";
}

TEST(Stores, ALogbookWithAnyHeadingIsReadWithoutACrash) {
  const std::string dir = temp_dir("stores_logbook_ids");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1})});
  const std::string book = dir + "/book.md";
  std::ofstream(book) << "### 2026-01-01 10:00 - RL-CPU-99999999999999999999 huge\n"
                         "### 2026-01-01 10:00 - RL-CPU-2147483647 edge\n";
  const auto r = run_bench("log --id RL-CPU-001 --hypothesis h --store " + s + " --logbook " + book);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto again = run_bench("log --id RL-CPU-001 --hypothesis h --store " + s + " --logbook " + book);
  expect_one_line(again, "again", {"RL-CPU-001 already"});
}

}  // namespace
}  // namespace moe::bench

namespace moe::bench {
namespace {

// `args` under a time limit: a reader that blocks on a pipe or reads /dev/zero forever fails the test
// (exit 124) instead of hanging the suite.
testing::Ran bounded(const std::string& args) {
  return testing::run_command("timeout 60 " + std::string(MOE_BENCH_BINARY) + " " + args);
}

TEST(Stores, AnOutputThatIsNotARegularFileIsCheckedBeforeItIsRead) {
  const std::string dir = temp_dir("stores_targets");
  const std::string fifo = dir + "/fifo", loop = dir + "/loop", dirs = dir + "/results";
  ASSERT_EQ(std::system(("mkfifo " + fifo + " && ln -s " + loop + " " + loop + " && mkdir " + dirs).c_str()),
            0);
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1})});
  const std::string long_name = dir + "/" + std::string(300, 'n') + ".jsonl";
  const std::string sweep = std::string("sweep ") + kRun + " --out ";
  for (const std::string& args : std::vector<std::string>{
           std::string(kRun) + " --out " + dir, sweep + dirs + "/", sweep + dir, sweep + loop,
           std::string(kRun) + " --out " + loop, sweep + long_name, std::string(kRun) + " --out " + long_name,
           "table " + dir, "table " + fifo, "table /dev/zero", "table " + loop, "table " + long_name,
           "compare " + s + " /dev/zero", "sweep --plan /dev/zero --out " + s,
           "sweep --plan " + fifo + " --out " + s, "sweep --plan " + dir + " --out " + s,
           "log --id A-001 --hypothesis h --store " + s + " --logbook " + dir,
           "log --id A-001 --hypothesis h --store " + s + " --logbook " + loop})
    expect_one_line(bounded(args), args, {"moe-bench: error: "});

  // A device or a pipe is written to, never read as a store.
  for (const char* dev : {"/dev/null", "/dev/zero"}) {
    const auto r = bounded(sweep + dev + " --topk 1,2");
    EXPECT_EQ(r.exit_code, 0) << dev << "\n" << r.err;
  }
  const auto piped = testing::run_command("(cat " + fifo + " > " + dir + "/piped.jsonl & timeout 60 " +
                                          MOE_BENCH_BINARY + " " + sweep + fifo + " --topk 1,2; wait)");
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  const std::vector<std::string> rows = split_lines(read_file(dir + "/piped.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(ResultRow::parse(rows[1]).contains("run_id"));
}

}  // namespace
}  // namespace moe::bench

namespace moe::bench {
namespace {

TEST(Stores, ARunWaitingForAnotherProcesssLockSaysSoOnce) {
  const std::string dir = temp_dir("stores_lock");
  const std::string s = store(dir + "/s.jsonl", {timed_row(tiny(1), {1, 1.1})});
  const auto r = testing::run_command("(flock " + s + " sleep 2 & sleep 0.3; timeout 60 " + MOE_BENCH_BINARY +
                                      " " + kRun + " --out " + s + "; wait)");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string says = "waiting for the lock on --out results file '" + s + "'";
  const size_t at = r.err.find(says);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(says, at + 1), std::string::npos) << "once\n" << r.err;
  EXPECT_EQ(split_lines(read_file(s)).size(), 2u);
}

}  // namespace
}  // namespace moe::bench
