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
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

}  // namespace moe::testing
