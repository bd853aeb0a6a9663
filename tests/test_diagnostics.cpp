// The oracle reads what the timed block computed, whatever diagnostics ran around it (issue 19 item 1):
// --check passes and --dump writes the same out.npy and gradients with and without --stage-timing,
// --trace-dir, --queue-mode prequeue and --repeats.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using moe::testing::read_file;
using moe::testing::run_bench;
using moe::testing::temp_dir;

// A shared expert: --stage-timing's stages leave it out, so an output they overwrite is ~70 % off.
const std::string kShape =
    "--tokens 64 --hidden 32 --mlp-dim 32 --experts 8 --topk 2 --iters 1 --warmup 0 --dtype float32 "
    "--impl fast --distribution random --shared-expert-dim 16 --threads 1 --device cpu";

// Each diagnostic flag, with the passes it applies to.
std::vector<std::string> diagnostics(const std::string& dir) {
  return {"",
          "--stage-timing",
          "--trace-dir " + dir + "/trace",
          "--queue-mode prequeue",
          "--queue-mode both",
          "--repeats 3 --iters 2",
          "--stage-timing --trace-dir " + dir + "/trace2 --queue-mode both --repeats 2"};
}

TEST(Diagnostics, CheckPassesUnderEveryDiagnosticFlag) {
  const std::string dir = temp_dir("diag_check");
  for (const char* pass : {"forward", "forward_backward"})
    for (const std::string& d : diagnostics(dir)) {
      const auto r = run_bench(kShape + " --bench-pass " + pass + " --check " + d);
      EXPECT_EQ(r.exit_code, 0) << pass << " " << d << "\n" << r.out << r.err;
      EXPECT_NE(r.out.find("CHECK pass=true"), std::string::npos) << pass << " " << d << "\n" << r.out;
    }
}

TEST(Diagnostics, DumpIsTheTimedResultUnderEveryDiagnosticFlag) {
  const std::string dir = temp_dir("diag_dump");
  for (const char* pass : {"forward", "forward_backward"}) {
    const std::string base = dir + "/base_" + pass;
    ASSERT_EQ(run_bench(kShape + " --bench-pass " + pass + " --dump " + base).exit_code, 0);
    const bool fb = std::string(pass) == "forward_backward";
    int n = 0;
    for (const std::string& d : diagnostics(dir)) {
      const std::string dump = dir + "/" + pass + std::to_string(n++);
      const auto r = run_bench(kShape + " --bench-pass " + pass + " --dump " + dump + " " + d);
      ASSERT_EQ(r.exit_code, 0) << d << "\n" << r.err;
      for (const char* f : {"out.npy", "grad_x.npy", "grad_w1.npy", "grad_shared_w2.npy"}) {
        if (!fb && std::string(f) != "out.npy") continue;
        EXPECT_EQ(read_file(dump + "/" + f), read_file(base + "/" + f)) << pass << " " << d << ": " << f;
      }
    }
  }
}

}  // namespace

namespace {

TEST(Diagnostics, ADumpOverAnEarlierOneLeavesOnlyItsOwnFiles) {
  const std::string dir = temp_dir("diag_redump");
  const std::string dump = dir + "/d";
  ASSERT_EQ(run_bench(kShape + " --bench-pass forward_backward --dump " + dump).exit_code, 0);
  std::ofstream(dump + "/notes.txt") << "mine\n";
  ASSERT_TRUE(std::filesystem::exists(dump + "/grad_x.npy"));
  const auto r = run_bench(kShape + " --bench-pass forward --dump " + dump);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* stale : {"grad_x.npy", "grad_w1.npy", "grad_w2.npy", "grad_w3.npy", "grad_shared_w1.npy",
                            "grad_shared_w2.npy", "grad_shared_w3.npy"})
    EXPECT_FALSE(std::filesystem::exists(dump + "/" + stale)) << stale;
  EXPECT_TRUE(std::filesystem::exists(dump + "/out.npy"));
  EXPECT_EQ(read_file(dump + "/notes.txt"), "mine\n") << "a file that is not ours stays";
}

}  // namespace
