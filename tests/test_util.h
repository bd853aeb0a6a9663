// Test helpers: every random test draws a fresh seed (or MOE_TEST_SEED from the environment to replay
// a failure) and prints it, so a failing case can be reproduced exactly; commands run as a user runs
// them, with stdout and stderr captured.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "moe/backend.h"
#include "moe/pack.h"
#include "moe/routing.h"

namespace moe::testing {

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("MOE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::mt19937_64 gen(std::random_device{}() ^
                             uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  return gen() % 1000000007ull;
}

// Draws a seed, prints it and records it in the test's XML properties.
inline uint64_t test_seed() {
  uint64_t seed = fresh_seed();
  std::printf("[ seed     ] MOE_TEST_SEED=%llu\n", (unsigned long long)seed);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

// The edge grid's hand-made routings: assignment (t, k) goes to expert(t, k) with weight 1/K + 0.05 k.
inline Routing edge_routing(int64_t tokens, int64_t topk, int64_t experts,
                            const std::function<int32_t(int64_t t, int64_t k)>& expert) {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < topk; ++k) {
      ids.push_back(expert(t, k));
      weights.push_back(1.0f / float(topk) + 0.05f * float(k));
    }
  return routing_from(tokens, topk, experts, ids, weights);
}

// Names of the registered backends (all, or all but `except`), for value-parameterized tests.
inline std::vector<std::string> backend_names(const std::string& except = "") {
  std::vector<std::string> names;
  for (const std::string& name : registered_backend_names())
    if (except != name) names.push_back(name);
  return names;
}

// The backend `name` for `kernel`, made once per test process and shared by the tests that ask for it,
// as a sweep shares one between its runs of one configuration (tests compare what ran, not how often).
inline Backend& test_backend(const std::string& name, const KernelConfig& kernel = {}) {
  static std::map<std::string, std::unique_ptr<Backend>> made;
  static std::mutex mutex;  // ranks as threads ask at once
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Backend>& b = made[name + " " + kernel.to_json() + " " + kernel.tuning_file];
  if (!b) b = make_backend(name, kernel);
  return *b;
}
inline std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// A dispatch plan (in any memory) copied to host vectors, the used rows only, for assertions.
struct PlanVectors {
  int64_t tokens = 0, topk = 0, experts = 0, rows = 0, live_rows = 0, dropped = 0;
  std::vector<int64_t> group_offset;    // (E+1)
  std::vector<int64_t> group_live;      // (E)
  std::vector<int32_t> row_assignment;  // (rows)
  std::vector<float> row_weight;        // (rows)
  std::vector<int32_t> assignment_row;  // (A)

  int64_t group_rows(int64_t e) const { return group_offset[size_t(e) + 1] - group_offset[size_t(e)]; }
  int32_t row_token(int64_t r) const {
    const int32_t a = row_assignment[size_t(r)];
    return a < 0 ? -1 : int32_t(a / topk);
  }
};

inline PlanVectors plan_vectors(const DispatchPlan& plan) {
  PlanVectors v;
  const PlanStats stats = plan_stats(plan);
  v.tokens = plan.tokens;
  v.topk = plan.topk;
  v.experts = plan.experts;
  v.rows = stats.rows;
  v.live_rows = stats.live_rows;
  v.dropped = stats.dropped;
  const Tensor offsets = plan.group_offset.to_host(), live = plan.group_live.to_host(),
               rows = plan.row_assignment.to_host(), weights = plan.row_weight.to_host(),
               assignment_row = plan.assignment_row.to_host();
  v.group_offset.assign(offsets.data<int64_t>(), offsets.data<int64_t>() + offsets.numel());
  v.group_live.assign(live.data<int64_t>(), live.data<int64_t>() + live.numel());
  v.row_assignment.assign(rows.data<int32_t>(), rows.data<int32_t>() + stats.rows);
  v.row_weight.assign(weights.data<float>(), weights.data<float>() + stats.rows);
  v.assignment_row.assign(assignment_row.data<int32_t>(),
                          assignment_row.data<int32_t>() + assignment_row.numel());
  return v;
}

struct Ran {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `cmd` through the shell. stderr goes through a file of its own per call and process, since
// ctest runs the tests of one binary in parallel.
inline Ran run_command(const std::string& cmd) {
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "moe_stderr_" + std::to_string(getpid()) + "_" +
                               std::to_string(++calls) + ".txt";
  Ran r{};
  FILE* p = popen((cmd + " 2>" + err_path).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (FILE* e = fopen(err_path.c_str(), "r")) {
    for (size_t n; (n = fread(buf, 1, sizeof buf, e)) > 0;) r.err.append(buf, n);
    fclose(e);
  }
  std::remove(err_path.c_str());
  return r;
}

// moe-bench with `args`.
inline Ran run_bench(const std::string& args) {
  return run_command(std::string(MOE_BENCH_BINARY) + " " + args);
}

// An empty directory of this process's own under the test temp dir (`name` tells the tests apart).
inline std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "moe_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

}  // namespace moe::testing
