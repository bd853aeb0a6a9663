// Sweeps (issue 8): every flag a list expanded in a documented order (src/bench/research/axes.h), JSON plans
// that mean the same as flags (plan.h), run_ids stable across processes, resumable stores, --repeats blocks
// with their samples, the ceiling measured once per key, and bad input refused with one line and
// nothing written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "bench/harness/run_id.h"
#include "bench/probes/ceiling.h"
#include "bench/research/axes.h"
#include "bench/research/plan.h"
#include "moe/backend.h"
#include "test_util.h"

namespace moe::bench {
namespace {

using testing::read_file;
using testing::run_bench;
using testing::split_lines;
using testing::temp_dir;

const char* kTiny =
    "--tokens 40 --hidden 16 --mlp-dim 8 --experts 4 --iters 2 --warmup 0 --threads 1 "
    "--distribution random --impl fused_w13";

std::vector<nlohmann::json> jsonl(const std::string& text) {
  std::vector<nlohmann::json> rows;
  for (const std::string& line : split_lines(text)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<std::vector<std::string>> point_args(const std::vector<std::string>& args) {
  std::vector<Point> points;
  const Status s = expand_axes(args, points);
  EXPECT_TRUE(s) << s.message();
  std::vector<std::vector<std::string>> out;
  for (const Point& p : points) out.push_back(p.args);
  return out;
}

TEST(Sweep, AxesExpandInFlagOrderFirstOutermostSeedListsUntouched) {
  const auto points = point_args({"--topk", "1,2", "--impl", "both", "--tokens=64-256*2", "--out",
                                  "a,b.jsonl", "--topk-list", "1,2", "--null-route-frac-list", "0,0.5"});
  ASSERT_EQ(points.size(), 6u);
  const std::vector<std::string> first = {
      "--topk", "1",         "--impl",      "both", "--tokens=64",
      "--out",  "a,b.jsonl", "--topk-list", "1,2",  "--null-route-frac-list",
      "0,0.5"};
  EXPECT_EQ(points[0], first);
  std::vector<std::string> order;
  for (const auto& p : points) order.push_back(p[1] + "/" + p[4]);
  EXPECT_EQ(order, (std::vector<std::string>{"1/--tokens=64", "1/--tokens=128", "1/--tokens=256",
                                             "2/--tokens=64", "2/--tokens=128", "2/--tokens=256"}));
}

TEST(Sweep, RangesFlagsWithoutValuesAndRepeatedFlags) {
  const FlagSpec& tokens = *find_flag("--tokens");
  std::vector<std::string> v;
  ASSERT_TRUE(expand_list(tokens, "1-4", v));
  EXPECT_EQ(v, (std::vector<std::string>{"1", "2", "3", "4"}));
  ASSERT_TRUE(expand_list(tokens, " 1-7+3, 100,", v));
  EXPECT_EQ(v, (std::vector<std::string>{"1", "4", "7", "100"}));
  ASSERT_TRUE(expand_list(tokens, "8-64*2", v));
  EXPECT_EQ(v, (std::vector<std::string>{"8", "16", "32", "64"}));
  for (const char* bad : {"8-1", "0-8*2", "1-4*1", "1-4+0"}) {
    const Status s = expand_list(tokens, bad, v);
    EXPECT_FALSE(s) << bad;
    EXPECT_NE(s.message().find("invalid --tokens range"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(expand_list(*find_flag("--capacity-factor"), "1-2", v));
  EXPECT_EQ(v, (std::vector<std::string>{"1-2"}))
      << "ranges are for integer flags; the parser judges the rest";

  EXPECT_EQ(point_args({"--check=false,true"}),
            (std::vector<std::vector<std::string>>{{"--check=false"}, {"--check=true"}}));
  EXPECT_EQ(point_args({"--tokens", "1,2", "--tokens", "5"}),
            (std::vector<std::vector<std::string>>{{"--tokens", "1,2", "--tokens", "5"}}))
      << "a repeated flag counts with its last value, as argparse";
  EXPECT_EQ(point_args({"--tokens", "5,"}), (std::vector<std::vector<std::string>>{{"--tokens", "5"}}));
  std::vector<Point> many;
  EXPECT_FALSE(expand_axes({"--tokens", "1-1000", "--hidden", "1-1000"}, many)) << "over kMaxPoints";
}

TEST(Sweep, PlanMeansWhatTheSameFlagsMean) {
  const std::string dir = temp_dir("plan");
  auto plan = [&](const std::string& json, std::vector<std::string>& args) {
    std::ofstream(dir + "/p.json") << json;
    return plan_args(dir + "/p.json", args);
  };
  std::vector<std::string> args;
  ASSERT_TRUE(plan(R"({"description": "x", "fixed": {"tokens": 512, "mlp-dim": 64, "capacity-factor": 0.5,
      "check": true, "topk-list": [1, 2]}, "axes": {"topk": [1, 2, 4], "impl": ["baseline", "fused_w13"],
      "seed": [3]}, "repeats": 2})",
                   args));
  EXPECT_EQ(args, (std::vector<std::string>{"--tokens=512", "--mlp-dim=64", "--capacity-factor=0.5",
                                            "--check=true", "--topk-list=1,2", "--topk=1,2,4",
                                            "--impl=baseline,fused_w13", "--seed=3,", "--repeats=2"}));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"fixd": {}})", "unknown key \"fixd\""},
      {R"({"fixed": {"tokenz": 1}})", "\"tokenz\" in \"fixed\" is not a moe-bench flag"},
      {R"({"axes": {"--topk": [1]}})", "is not a moe-bench flag"},
      {R"({"fixed": {"out": "x.jsonl"}})", "cannot be set in a plan"},
      {R"({"axes": {"topk": 2}})", "expected a non-empty array"},
      {R"({"axes": {"topk": []}})", "expected a non-empty array"},
      {R"({"fixed": {"topk": 2}, "axes": {"topk": [1]}})", "both fixed and an axis"},
      {R"({"fixed": {"topk": [1, 2]}})", "belongs in \"axes\""},
      {R"({"fixed": {"impl": "baseline,fast"}})", "holds a comma"},
      {R"({"fixed": {"tokens": null}})", "expected a string, number or true/false"},
      {R"({"repeats": 2, "fixed": {"repeats": 3}})", "given twice"},
      {R"({"axes": {"out": ["a"]}})", "cannot be set in a plan"},
      {R"({"fixed": {"tokens": 1,}})", "not JSON"},
      {R"([1, 2])", "expected a JSON object"},
      // issue 41 item 3: a description nested this deep overflowed the stack under ASan
      {"{\"description\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
       "nested deeper than 256 levels"},
  };
  for (const auto& [json, message] : bad) {
    const Status s = plan(json, args);
    EXPECT_FALSE(s) << json;
    EXPECT_NE(s.message().find(message), std::string::npos) << json << " -> " << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
}

TEST(Sweep, RunIdIsPinnedAndNamesTheMeasurementNotTheCommand) {
  // A change here changes every stored run_id: bump kRowSchema (run_id.h) with it.
  const Protocol p{5, 2, 1, "moe-bench", 1, ""};
  EXPECT_EQ(run_id(MoeConfig{}, KernelConfig{}, p, "full"), "1f68680a4a2eb49a");
  Protocol other_command = p;
  other_command.command = "elsewhere";
  EXPECT_EQ(run_id(MoeConfig{}, KernelConfig{}, other_command, "full"),
            run_id(MoeConfig{}, KernelConfig{}, p, "full"));
  Protocol more = p;
  more.repeats = 3;
  EXPECT_NE(run_id(MoeConfig{}, KernelConfig{}, more, "full"),
            run_id(MoeConfig{}, KernelConfig{}, p, "full"));
  EXPECT_NE(run_id(MoeConfig{}, KernelConfig{}, p, "prequeue"),
            run_id(MoeConfig{}, KernelConfig{}, p, "full"));
  MoeConfig c;
  c.topk = 2;
  EXPECT_NE(run_id(c, KernelConfig{}, p, "full"), run_id(MoeConfig{}, KernelConfig{}, p, "full"));
  // A later knob names the measurement only where it is set away from its default.
  KernelConfig streams;
  streams.cuda_gemm_streams = 1;
  EXPECT_NE(run_id(MoeConfig{}, streams, p, "full"), run_id(MoeConfig{}, KernelConfig{}, p, "full"));
}

TEST(Sweep, ResumeSkipsFinishedRunsAndATornRowIsCutOff) {
  const std::string dir = temp_dir("resume"), store = dir + "/s.jsonl";
  const auto first = run_bench(std::string("sweep ") + kTiny + " --topk 1,2 --out " + store);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(jsonl(read_file(store)).size(), 2u);
  std::ofstream(store, std::ios::app) << "{\"distribution\":\"ran";  // a writer killed mid-row
  const auto resumed = run_bench(std::string("sweep ") + kTiny + " --topk 1-3 --out " + store);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 of 3 runs were in"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("ETA"), std::string::npos) << "a progress line per run";
  std::vector<std::string> results;
  for (const std::string& line : split_lines(resumed.out))
    if (line.rfind("RESULT", 0) == 0) results.push_back(line);
  ASSERT_EQ(results.size(), 1u) << resumed.out;
  EXPECT_NE(results[0].find(" topk=3 "), std::string::npos);
  const auto rows = jsonl(read_file(store));
  ASSERT_EQ(rows.size(), 3u);
  std::set<std::string> ids;
  for (const auto& r : rows) ids.insert(r["run_id"].get<std::string>());
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_NE(rows[2]["command"].get<std::string>().find("sweep"), std::string::npos);

  // The same run in another process has the same run_id.
  const auto again = run_bench(std::string(kTiny) + " --topk 1 --format jsonl");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(jsonl(again.out).at(0)["run_id"], rows[0]["run_id"]);
  const auto nothing_left = run_bench(std::string("sweep ") + kTiny + " --topk 1-3 --out " + store);
  EXPECT_EQ(nothing_left.exit_code, 0);
  EXPECT_EQ(nothing_left.out.find("RESULT"), std::string::npos);
  EXPECT_EQ(jsonl(read_file(store)).size(), 3u);
}

TEST(Sweep, RepeatsAreSeparateBlocksAndRowsCarryTheirSpread) {
  const auto r = run_bench(std::string(kTiny) + " --topk 2 --iters 2 --repeats 3 --format jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = jsonl(r.out).at(0);
  EXPECT_EQ(row["repeats"], 3);
  ASSERT_EQ(row["samples_s"].size(), 3u);
  std::vector<double> all;
  for (const auto& block : row["samples_s"]) {
    EXPECT_EQ(block.size(), 2u);
    for (const auto& s : block) all.push_back(s.get<double>());
  }
  const TimingStats t = summarize(all);
  EXPECT_DOUBLE_EQ(row["time_s"].get<double>(), t.mean);
  EXPECT_DOUBLE_EQ(row["time_stddev_s"].get<double>(), t.stddev);
  EXPECT_DOUBLE_EQ(row["time_min_s"].get<double>(), t.min);
  EXPECT_DOUBLE_EQ(row["time_max_s"].get<double>(), t.max);
}

TEST(Sweep, CeilingIsMeasuredOncePerKeyUnlessAskedOtherwise) {
  Backend& cpu = testing::test_backend("cpu");
  MoeConfig tiny;  // too small to time: measure_ceiling returns at once, and still counts
  tiny.tokens = 8, tiny.hidden = 8, tiny.mlp_dim = 8, tiny.topk = 1;
  CeilingCache cache;
  EXPECT_TRUE(cache.get(CeilingMode::off, cpu, tiny).off);
  EXPECT_EQ(cache.measurements(), 0);
  cache.get(CeilingMode::once, cpu, tiny);
  cache.get(CeilingMode::once, cpu, tiny);
  EXPECT_EQ(cache.measurements(), 1);
  tiny.impl = Impl::baseline;  // not part of the ceiling's key
  cache.get(CeilingMode::once, cpu, tiny);
  EXPECT_EQ(cache.measurements(), 1);
  tiny.tokens = 9;
  cache.get(CeilingMode::once, cpu, tiny);
  EXPECT_EQ(cache.measurements(), 2);
  cache.get(CeilingMode::every_run, cpu, tiny);
  EXPECT_EQ(cache.measurements(), 3);

  // Through the CLI: a timed ceiling shared by two impls, and none with --ceiling off.
  const std::string shape =
      "--tokens 256 --hidden 128 --mlp-dim 128 --experts 4 --topk 2 --iters 1 --warmup 0 "
      "--threads 1 --distribution random --impl baseline,fused_w13 --format jsonl";
  const auto once = run_bench(shape + " --ceiling once");
  ASSERT_EQ(once.exit_code, 0) << once.err;
  const auto rows = jsonl(once.out);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(rows[0]["ceiling_tflops"].is_number());
  EXPECT_EQ(rows[0]["ceiling_tflops"], rows[1]["ceiling_tflops"]);
  const auto off = run_bench(shape + " --ceiling off");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  for (const auto& r : jsonl(off.out)) {
    EXPECT_TRUE(r["pct_of_ceiling"].is_null());
    EXPECT_EQ(r["ceiling_note"], "off");
  }
}

TEST(Sweep, AnyFlagIsAnAxisAndEachPointRunsWithItsOwnSettings) {
  const auto r = run_bench(std::string(kTiny) +
                           " --topk 1 --device cpu,ref --gemm-variant auto,portable "
                           "--threads 1,2 --format jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = jsonl(r.out);
  ASSERT_EQ(rows.size(), 8u);
  std::vector<std::string> got;
  for (const auto& row : rows) {
    got.push_back(row["device"].get<std::string>() + "/" + row["gemm_variant"].get<std::string>() + "/" +
                  std::to_string(row["threads"].get<int>()));
    // The kernels that ran per GEMM form: the point's variant's (cpu), none (ref's own loops).
    const std::string kernels = row["gemm_kernels"];
    if (row["device"] == "ref") {
      EXPECT_EQ(kernels, "none");
    } else if (row["gemm_variant"] == "portable") {
      EXPECT_EQ(kernels.find("onednn"), std::string::npos) << kernels;
    }
    EXPECT_FALSE(row["gemm_library"].get<std::string>().empty());
  }
  // kTiny gives --threads first: it is the outermost axis, then --device, then --gemm-variant.
  EXPECT_EQ(got, (std::vector<std::string>{"cpu/auto/1", "cpu/portable/1", "ref/auto/1", "ref/portable/1",
                                           "cpu/auto/2", "cpu/portable/2", "ref/auto/2", "ref/portable/2"}));
}

TEST(Sweep, APlanAndTheSameFlagsMakeTheSameRuns) {
  const std::string dir = temp_dir("plan_flags");
  std::ofstream(dir + "/p.json") << R"({"fixed": {"tokens": 40, "hidden": 16, "mlp-dim": 8, "experts": 4,
      "iters": 2, "warmup": 0, "threads": 1, "distribution": "random", "impl": "fused_w13"},
      "axes": {"topk": [1, 2], "dtype": ["float32", "bfloat16"]}})";
  ASSERT_EQ(run_bench("sweep --plan " + dir + "/p.json --out " + dir + "/plan.jsonl").exit_code, 0);
  ASSERT_EQ(run_bench(std::string("sweep ") + kTiny + " --topk 1,2 --dtype float32,bfloat16 --out " + dir +
                      "/flags.jsonl")
                .exit_code,
            0);
  auto ids = [&](const std::string& store) {
    std::vector<std::string> v;
    for (const auto& r : jsonl(read_file(store))) v.push_back(r["run_id"]);
    return v;
  };
  EXPECT_EQ(ids(dir + "/plan.jsonl").size(), 4u);
  EXPECT_EQ(ids(dir + "/plan.jsonl"), ids(dir + "/flags.jsonl")) << "same runs, same order";
}

TEST(Sweep, AnInterruptedSweepLosesAtMostTheRunInFlight) {
  const std::string dir = temp_dir("interrupt"), store = dir + "/s.jsonl";
  const std::string args =
      std::string("sweep ") + kTiny + " --topk 1-4 --seed 1-6 --iters 400 --repeats 5 --out " + store;
  const pid_t pid = fork();
  if (pid == 0) {
    // The child's output is not the test's; a child that cannot silence it exits before the exec.
    if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) _exit(126);
    execl("/bin/sh", "sh", "-c", ("exec " + std::string(MOE_BENCH_BINARY) + " " + args).c_str(), nullptr);
    _exit(127);
  }
  // Ctrl-C once the first run's rows are in the store (or after the whole sweep, on a fast machine).
  for (int i = 0; i < 3000 && split_lines(read_file(store)).empty(); ++i) usleep(10000);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const size_t kept = jsonl(read_file(store)).size();
  EXPECT_GE(kept, 1u);
  std::printf("interrupted with %zu of 24 rows in the store\n", kept);
  const auto resumed = run_bench(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto rows = jsonl(read_file(store));
  std::set<std::string> ids;
  for (const auto& r : rows) ids.insert(r["run_id"].get<std::string>());
  EXPECT_EQ(rows.size(), 24u) << "4 topk x 6 seeds, each once";
  EXPECT_EQ(ids.size(), 24u);
}

TEST(Sweep, BadInputIsOneLineExitTwoAndNothingWritten) {
  const std::string dir = temp_dir("sweep_bad"), store = dir + "/s.jsonl", old = dir + "/old.jsonl",
                    plan = dir + "/p.json";
  ASSERT_EQ(run_bench(std::string("sweep ") + kTiny + " --topk 1 --out " + store).exit_code, 0);
  std::ofstream(old) << "{\"distribution\":\"random\",\"tflops\":1.0}\n";
  std::ofstream(plan) << R"({"fixed": {"tokens": 40}, "axes": {"topkk": [1, 2]}})";
  const std::string before = read_file(store), old_before = read_file(old);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sweep --plan " + plan + " --out " + store, "\"topkk\" in \"axes\" is not a moe-bench flag"},
      {"sweep --plan " + dir + "/missing.json --out " + store, "cannot be read"},
      {std::string("sweep ") + kTiny + " --topk 1,2", "needs --out STORE"},
      {std::string("sweep ") + kTiny + " --topk 1,2 --format csv --out " + store,
       "writes its store as jsonl"},
      {std::string("sweep ") + kTiny + " --topk 1,2 --out " + old, "without row_schema"},
      {std::string(kTiny) + " --topk 1,2 --format jsonl --out " + old, "without row_schema"},
      {std::string(kTiny) + " --topk 1,9 --out " + store, "Invalid topk=9"},
      {std::string(kTiny) + " --topk 4-1 --out " + store, "first > last"},
      {std::string(kTiny) + " --ceiling sometimes --out " + store, "invalid --ceiling"},
      {std::string(kTiny) + " --repeats 0 --out " + store, "--repeats"},
      {std::string(kTiny) + " --topk 1 --check=false,true --format csv --out " + dir + "/x.csv",
       "different columns"},
      // Values are checked before their product is made (each point copies every value).
      {std::string(kTiny) + " --impl fast," + std::string(100000, 'x') + " --seed 1-50000 --out " + store,
       "100000 characters"},
      {std::string(kTiny) + " --trace-dir " + dir + "/" + std::string(3000, 't') + " --seed 1-99999 --out " +
           store,
       "over 256 MiB"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_bench(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(split_lines(r.err).size(), 1u) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("moe-bench: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << " -> " << r.err;
  }
  EXPECT_EQ(read_file(store), before);
  EXPECT_EQ(read_file(old), old_before);
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.csv"));
}

}  // namespace
}  // namespace moe::bench
