// Sweeps sharing a store (issue 19 item 4): a run is claimed before it runs, so N concurrent sweeps run
// each point once, and the point of a claimer that was killed is run again by the next sweep.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "bench/research/claims.h"
#include "test_util.h"

namespace {

using moe::testing::read_file;
using moe::testing::run_command;
using moe::testing::split_lines;
using moe::testing::temp_dir;

// Runs long enough (tens of ms) that concurrent sweeps overlap.
const std::string kSweep = std::string(MOE_BENCH_BINARY) +
                           " sweep --tokens 256 --hidden 64 --mlp-dim 64 --experts 8 --iters 4 --warmup 0 "
                           "--threads 1 --dtype float32 --impl fast --distribution random --queue-mode full "
                           "--ceiling off --topk 1-8";

// (rows, distinct run_ids) of a store.
std::pair<size_t, size_t> rows_and_ids(const std::string& store) {
  std::set<std::string> ids;
  size_t rows = 0;
  for (const std::string& line : split_lines(read_file(store))) {
    ids.insert(nlohmann::json::parse(line)["run_id"].get<std::string>());
    ++rows;
  }
  return {rows, ids.size()};
}

TEST(Claims, ConcurrentSweepsOnOneStoreRunEachPointOnce) {
  const std::string dir = temp_dir("claims_concurrent"), store = dir + "/shared.jsonl";
  const std::string one = kSweep + " --out " + store + " >/dev/null 2>>" + dir + "/err.txt";
  const auto r = run_command("(" + one + " & " + one + " & " + one + " & wait)");
  ASSERT_EQ(r.exit_code, 0) << read_file(dir + "/err.txt");
  EXPECT_EQ(rows_and_ids(store), std::make_pair(size_t(8), size_t(8))) << read_file(dir + "/err.txt");
}

TEST(Claims, AKilledClaimersPointIsRunAgain) {
  const std::string dir = temp_dir("claims_killed"), store = dir + "/shared.jsonl";
  // A sweep whose runs take ~a second each, killed while it holds a claim.
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c",
          ("exec " + kSweep + " --iters 400 --out " + store + " >/dev/null 2>/dev/null").c_str(), nullptr);
    _exit(127);
  }
  const std::string claims = store + ".claims";
  for (int waited_ms = 0; waited_ms < 20000; waited_ms += 10) {
    std::error_code ec;
    if (std::filesystem::file_size(claims, ec) > 0 && !ec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(std::filesystem::file_size(claims), 0u) << "the first sweep claims its run";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const auto r = run_command(kSweep + " --out " + store + " >/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(rows_and_ids(store), std::make_pair(size_t(8), size_t(8))) << r.err;
}

// Claims no process here can vouch for (another host's, issue 41 item 5: waited on forever) hold while
// renewed and expire a lease after their last renewal.
TEST(Claims, AnotherHostsClaimHoldsWhileRenewedAndExpiresAfterTheLease) {
  const std::string dir = temp_dir("claims_lease"), probe = dir + "/probe.jsonl", store = dir + "/s.jsonl";
  ASSERT_EQ(run_command(kSweep + " --out " + probe + " >/dev/null").exit_code, 0);
  std::set<std::string> ids;
  for (const std::string& line : split_lines(read_file(probe)))
    ids.insert(nlohmann::json::parse(line)["run_id"].get<std::string>());
  ASSERT_EQ(ids.size(), 8u);
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  auto claim_all = [&](int64_t renewed) {
    std::ofstream claims(store + ".claims");
    for (const std::string& id : ids) claims << id << " elsewhere 1 1 " << renewed << "\n";
  };
  claim_all(now);  // renewed just now: honoured, so the sweep waits for them
  const auto waits = run_command("timeout 3 " + kSweep + " --out " + store + " >/dev/null");
  EXPECT_EQ(waits.exit_code, 124) << waits.err;
  EXPECT_NE(waits.err.find("waiting for 8 runs"), std::string::npos) << waits.err;
  claim_all(now - moe::bench::kClaimLeaseSeconds - 60);  // last renewed over a lease ago: expired
  const auto runs = run_command("timeout 60 " + kSweep + " --out " + store + " >/dev/null");
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_EQ(rows_and_ids(store), std::make_pair(size_t(8), size_t(8))) << runs.err;
}

}  // namespace
