// The readers of the files a user hands us (plans, result stores, logbooks) on random mutations of
// valid files: bytes flipped, cut, repeated or spliced with JSON and Markdown fragments, and values of
// a row swapped for ones of the wrong shape. Every reader must either accept the file or answer one line
// naming it; none may crash, throw or hang, and an append never loses a line that was whole. The seed
// is printed (MOE_TEST_SEED replays it); a few mutated files also go through the CLI (exit 0 or 2).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/research/axes.h"
#include "bench/research/compare.h"
#include "bench/research/logbook.h"
#include "bench/research/plan.h"
#include "bench/research/store.h"
#include "bench/research/table.h"
#include "result_rows.h"
#include "test_util.h"

namespace moe::bench {
namespace {

using testing::read_file;
using testing::split_lines;
using testing::temp_dir;

constexpr int kMutations = 300;  // per reader
constexpr int kCliRuns = 8;      // per CLI reader

const char* const kFragments[] = {"\"",
                                  "{",
                                  "}",
                                  "[",
                                  "]",
                                  ",",
                                  ":",
                                  "\n",
                                  "1e400",
                                  "-1",
                                  "null",
                                  "\"\"",
                                  "0",
                                  "[]",
                                  "[[]]",
                                  "{}",
                                  "-0.0",
                                  "\\u0000",
                                  "\xff\xfe",
                                  "-",
                                  "true",
                                  "1-99999",
                                  "99999999999999999999",
                                  "\"tokens\": 1, ",
                                  "\r\n",
                                  "### 2026-01-01 10:00 - FZ-CPU-99999999999999999999 x\n",
                                  "### - -001\n",
                                  "\"samples_s\": [], "};

// A random byte-level mutation of `text`: 1-4 edits.
std::string mutate(std::string text, std::mt19937_64& g) {
  auto at = [&](size_t n) { return n == 0 ? size_t(0) : size_t(g() % (n + 1)); };
  for (int edits = 1 + int(g() % 4); edits > 0; --edits) {
    const size_t i = at(text.size());
    switch (g() % 6) {
      case 0:
        if (!text.empty()) text[std::min(i, text.size() - 1)] = char(g());
        break;
      case 1:
        text.erase(i, size_t(g() % 24));
        break;
      case 2:
        text.insert(i, kFragments[g() % std::size(kFragments)]);
        break;
      case 3: {
        const size_t j = at(text.size());
        text.insert(i, text.substr(j, size_t(g() % 64)));
        break;
      }
      case 4:
        text.resize(i);
        break;
      default:
        text.insert(i, 1, char(g() % 128));
        break;
    }
  }
  return text;
}

// An object mutated as JSON: a key dropped, or its value swapped for one of another shape.
std::string mutate_value(const ResultRow& object, std::mt19937_64& g) {
  static const char* const kValues[] = {"[]",
                                        "[[]]",
                                        "\"x\"",
                                        "-1",
                                        "1e308",
                                        "null",
                                        "{}",
                                        "true",
                                        "[[1, \"x\"]]",
                                        "[1, 2]",
                                        "0",
                                        "\"\"",
                                        "[[0.5, 1e308]]",
                                        "\"1-99999\"",
                                        "\"a,b\"",
                                        "[\"fast\", 2]",
                                        "0.5",
                                        "99999999999999999999",
                                        "-0.0",
                                        "[\"1-4\", \"2*8\"]"};
  ResultRow r = object;
  if (r.empty()) return r.dump();
  auto it = r.begin();
  std::advance(it, long(g() % r.size()));
  const std::string key = it.key();
  if (g() % 4 == 0)
    r.erase(key);
  else
    r[key] = ResultRow::parse(kValues[g() % std::size(kValues)]);
  return r.dump();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A refusal is one line naming the file.
void expect_one_line(const Status& s, const std::string& path, const std::string& text) {
  if (s) return;
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message() << "\nfile:\n" << text;
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message() << "\nfile:\n" << text;
}

// Each call well under the suite's patience: a reader that loops shows here, not as a ctest timeout.
class Clock {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// How many mutated files the reader accepted: a fuzz whose files are all refused at the first byte
// would test little.
// (A logbook is free text: every one is accepted.)
void report(int accepted, bool some_refused = true) {
  std::printf("[ fuzz     ] %d of %d mutated files accepted\n", accepted, kMutations);
  EXPECT_GT(accepted, 0);
  if (some_refused) {
    EXPECT_LT(accepted, kMutations);
  }
}

TEST(FuzzReaders, Plans) {
  std::mt19937_64 g(moe::testing::test_seed());
  const std::string dir = temp_dir("fuzz_plans"), path = dir + "/p.json";
  const std::string valid =
      R"({"description": "fuzz", "fixed": {"tokens": 32, "hidden": 16, "check": true, "dtype": "float32",
      "seed": -3}, "axes": {"topk": [1, 2], "impl": ["fast", "baseline"], "capacity-factor": [0.5, 1.25]},
      "repeats": 2})";
  const Clock clock;
  int accepted = 0;
  for (int n = 0; n < kMutations; ++n) {
    std::string text = mutate(valid, g);
    if (n % 2 == 1) {  // a value of "fixed" or "axes" of another shape
      ResultRow plan = ResultRow::parse(valid);
      const char* section = g() % 2 ? "fixed" : "axes";
      plan[section] = ResultRow::parse(mutate_value(plan[section], g));
      text = plan.dump();
    }
    write(path, text);
    std::vector<std::string> args;
    const Status s = plan_args(path, args);
    expect_one_line(s, path, text);
    accepted += bool(s);
    if (!s) continue;
    // What a sweep does next with them: the points, and each point's flags (the first few).
    std::vector<Point> points;
    if (Status e = expand_axes(args, points); !e) {
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
      continue;
    }
    for (size_t p = 0; p < std::min<size_t>(points.size(), 3); ++p) {
      std::vector<std::string> argv_text = {"moe-bench"};
      argv_text.insert(argv_text.end(), points[p].args.begin(), points[p].args.end());
      std::vector<char*> argv;
      for (std::string& a : argv_text) argv.push_back(a.data());
      BenchOptions o;
      bool exit_ok = false;
      const Status po = parse_options(int(argv.size()), argv.data(), o, exit_ok);
      if (!po) {
        EXPECT_EQ(po.message().find('\n'), std::string::npos) << po.message();
      }
    }
  }
  report(accepted);
  EXPECT_LT(clock.seconds(), 20.0);
}

TEST(FuzzReaders, Stores) {
  std::mt19937_64 g(moe::testing::test_seed());
  const std::string dir = temp_dir("fuzz_stores"), path = dir + "/s.jsonl";
  ResultRow checked = testing::timed_row(testing::tiny(2), {1, 1.2, 0.9});
  add_check_fields(checked, ConditionedCheck{});
  const std::vector<ResultRow> rows = {testing::timed_row(testing::tiny(1), {1, 1.1}), checked,
                                       testing::timed_row(testing::tiny(1, Impl::fast), {0.5, 0.6})};
  std::string valid;
  for (const ResultRow& r : rows) valid += r.dump() + "\n";
  const Clock clock;
  int accepted = 0;
  for (int n = 0; n < kMutations; ++n) {
    std::string text = valid;
    if (n % 2 == 0) {
      text = mutate(valid, g);
    } else {
      const size_t victim = size_t(g() % rows.size());
      text.clear();
      for (size_t i = 0; i < rows.size(); ++i)
        text += (i == victim ? mutate_value(rows[i], g) : rows[i].dump()) + "\n";
    }
    write(path, text);
    std::vector<ResultRow> read;
    const Status s = read_store(path, read);
    expect_one_line(s, path, text);
    accepted += bool(s);
    StoreIndex index(path);
    expect_one_line(index.refresh(), path, text);
    if (s) {
      std::string md;
      for (const std::vector<std::string>& cols :
           {std::vector<std::string>{}, std::vector<std::string>{"topk", "check_pass", "tflops", "run_id"}})
        if (Status t = rows_table(read, cols, md); !t) {
          EXPECT_EQ(t.message().find('\n'), std::string::npos);
        }
      CompareOptions c;
      c.base = path + ":impl=fused_w13";
      c.fresh = path + ":impl=fast";
      if (Status t = compare_markdown(c, md); !t) {
        EXPECT_EQ(t.message().find('\n'), std::string::npos);
      }
    }
    // An append keeps every line that was a row (a torn last one, which does not parse, may go).
    const Status a = append_rows(path, OutputFormat::jsonl, {rows.front()});
    expect_one_line(a, path, text);
    if (a) {
      const std::string after = read_file(path);
      const std::vector<std::string> lines = split_lines(text);
      for (size_t i = 0; i < lines.size(); ++i) {
        const bool kept_whole = after.find(lines[i] + "\n") != std::string::npos;
        const bool torn_tail = i + 1 == lines.size() && text.back() != '\n' &&
                               !ResultRow::parse(lines[i], nullptr, false).is_object();
        EXPECT_TRUE(kept_whole || torn_tail) << "line " << i + 1 << " lost:\n"
                                             << text << "\nafter:\n"
                                             << after;
      }
    }
  }
  report(accepted);
  EXPECT_LT(clock.seconds(), 20.0);
}

TEST(FuzzReaders, Logbooks) {
  std::mt19937_64 g(moe::testing::test_seed());
  const std::string dir = temp_dir("fuzz_logbooks"), path = dir + "/book.md";
  const std::string valid =
      "# Research logbook\n\n## Experiment Log\n\n### 2026-02-10 10:40 - FZ-CPU-001 Kickoff (confidence: "
      "exploratory)\n- Hypothesis: x\n- Command:\n```bash\nmoe-bench --topk 1,2\n```\n\n### 2026-02-11 "
      "09:00 - FZ-CPU-002\n- Result:\n\n| topk | TF/s |\n| ---: | ---: |\n| 1 | 0.5 |\n";
  LogOptions o;
  o.id = "FZ-CPU-003";
  o.logbook = path;
  const std::string entry = "### 2026-02-12 09:00 - FZ-CPU-003\n- Hypothesis: y\n";
  const Clock clock;
  int accepted = 0;
  for (int n = 0; n < kMutations; ++n) {
    const std::string text = mutate(valid, g);
    write(path, text);
    const Status s = append_log_entry(o, entry);
    expect_one_line(s, path, text);
    accepted += bool(s);
    if (s)
      EXPECT_EQ(read_file(path).substr(0, text.size()), text) << "a logbook is only appended to";
    else
      EXPECT_EQ(read_file(path), text) << "a refused entry writes nothing";
  }
  report(accepted, false);
  EXPECT_LT(clock.seconds(), 20.0);
}

// The same readers as a user runs them: exit 0 or one line and exit 2.
TEST(FuzzReaders, CliAnswersZeroOrOneLineAndTwo) {
  std::mt19937_64 g(moe::testing::test_seed());
  const std::string dir = temp_dir("fuzz_cli");
  const std::string s = testing::store(dir + "/good.jsonl", {testing::timed_row(testing::tiny(1), {1, 1.1})});
  const std::string row = read_file(s);
  for (int n = 0; n < kCliRuns; ++n) {
    const std::string store = dir + "/s.jsonl", book = dir + "/book.md";
    write(store, row + mutate(row, g));
    write(book, mutate("# Logbook\n\n### 2026-02-10 10:40 - FZ-CPU-001 x\n- Hypothesis: x\n", g));
    for (const std::string& args :
         {"table " + store + " --columns topk,check_pass,time_s",
          "log --id FZ-CPU-007 --hypothesis h --store " + s + " --logbook " + book}) {
      const auto r = moe::testing::run_command("timeout 60 " + std::string(MOE_BENCH_BINARY) + " " + args);
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << args << " -> " << r.exit_code << "\n" << r.err;
      if (r.exit_code == 2) {
        EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
        EXPECT_EQ(r.out, "");
      }
    }
  }
}

}  // namespace
}  // namespace moe::bench
