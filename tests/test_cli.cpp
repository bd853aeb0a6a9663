// moe-bench as a user runs it: bad input gets one clear line on stderr and exit code 2, never a crash;
// a tiny run prints seed-format lines and a passing CHECK.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace {

struct Ran {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

Ran run_bench(const std::string& args) {
  // One stderr file per call and process: ctest runs tests of this binary in parallel.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "moe_cli_stderr_" + std::to_string(getpid()) + "_" +
                               std::to_string(++calls) + ".txt";
  const std::string cmd = std::string(MOE_BENCH_BINARY) + " " + args + " 2>" + err_path;
  Ran r{};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  FILE* e = fopen(err_path.c_str(), "r");
  while (e && (n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
  if (e) fclose(e);
  std::remove(err_path.c_str());
  return r;
}

const char* kTiny =
    "--tokens 33 --hidden 16 --mlp-dim 12 --experts 4 --topk 2 --iters 1 --warmup 0 --threads 1";

TEST(Cli, BadInputIsOneLineAndExitTwo) {
  const char* bad[] = {
      "--tokens -5",
      "--tokens 0",
      "--iters abc",
      "--topk 0 --experts 4",
      "--topk 5 --experts 4",
      "--topk-list 1,x",
      "--impl nope",
      "--backend cuda",
      "--dtype float16",
      "--distribution zipf",
      "--capacity-policy maybe",
      "--remat-mode all",
      "--hidden 0",
      "--mlp-dim -1",
      "--experts 0",
      "--no-such-flag",
      "--quant-mode int8",
      "--parallel-mode ep",
      "--tokens 100000000 --hidden 100000 --experts 64",
      "--queue-mode sometimes",
      "--iters 0",
      "--threads -1",
      "--dump /etc/passwd",
      "--gemm-variant blas",
      "--format yaml",
      "--null-route-frac 1.5",
      "--null-route-frac 0.3 --capacity-policy drop --capacity-factor 1",
      "--device nosuch",
      "--device ''",
      "--quant-mode int9",
      "--parallel-mode dp",
      "--ep-comm-path ring_ag_rs",
      "--ep-comm-path all_to_all --parallel-mode ep",
      "--check-perturb nan",

  };
  for (const char* args : bad) {
    Ran r = run_bench(std::string(kTiny) + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << args;
    ASSERT_FALSE(r.err.empty()) << args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line for " << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("moe-bench: error: ", 0), 0u) << r.err;
  }
}

TEST(Cli, TinyRunPrintsSeedLinesAndPassesCheck) {
  Ran r = run_bench(
      std::string(kTiny) +
      " --impl fused_w13 --distribution random --dtype float32 --bench-pass forward_backward --check");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("shape tokens=33 hidden=16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[random] mode=full pass=forward_backward topk=2 impl=fused_w13 time_s="),
            std::string::npos);
  EXPECT_NE(
      r.out.find(
          "RESULT distribution=random mode=full pass=forward_backward impl=fused_w13 backend=gmm topk=2 "
          "null_target=0.000 null_realized=0.000 null_mode=independent null_assignments=0 "
          "real_assignments=66 tflops="),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ceiling_tflops="), std::string::npos);
  EXPECT_NE(r.out.find("CHECK pass=true"), std::string::npos) << r.out;
}

// Roadmap values parse, and whoever would run them says they are not built yet, before any run.
TEST(Cli, UnbuiltModesSayWhoRefusesThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"--quant-mode int8_routed", "--quant-mode int8_routed is not implemented yet on backend cpu"},
      {"--quant-mode int8 --device ref", "--quant-mode int8 is not implemented yet on backend ref"},
      {"--parallel-mode ep", "--parallel-mode ep is not implemented yet"},
      {"--device nosuch", "expected one of cpu, ref"},
      // No GPU here, or (on a GPU machine) the skeleton's missing ops: refused either way, with the reason.
      {"--device cuda", "--device cuda cannot run this block: "},
  };
  for (const auto& [args, want] : cases) {
    Ran r = run_bench(std::string(kTiny) + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
  }
}

// The acceptance command of the stage-ops issue on each host backend, every impl and both
// distributions, forward and forward_backward.
TEST(Cli, EveryHostDeviceRunsTheBlockAndPassesCheck) {
  for (const char* device : {"cpu", "ref"})
    for (const char* pass : {"forward", "forward_backward"}) {
      Ran r = run_bench(std::string(kTiny) + " --device " + device + " --bench-pass " + pass +
                        " --shared-expert-dim 8 --dtype bfloat16 --check --remat-mode expert_mlp");
      ASSERT_EQ(r.exit_code, 0) << device << " " << pass << ": " << r.err;
      size_t passes = 0;
      for (size_t pos = 0; (pos = r.out.find("CHECK pass=true", pos)) != std::string::npos; ++pos) ++passes;
      EXPECT_EQ(passes, 12u) << device << " " << pass << ":\n" << r.out;  // 6 impls x 2 distributions
      EXPECT_NE(r.out.find(std::string("device=") + device), std::string::npos) << r.out;
    }
}

// The oracle is sensitive: a result off by a relative 1e-3 (f32) or 5 % (bf16) fails --check, exit 1.
TEST(Cli, APerturbedResultFailsCheck) {
  const std::string base = std::string(kTiny) + " --impl fused_w13 --distribution random --check";
  for (const char* pass : {"forward", "forward_backward"}) {
    Ran ok = run_bench(base + " --dtype float32 --bench-pass " + pass + " --check-perturb 0");
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
    Ran f32 = run_bench(base + " --dtype float32 --bench-pass " + pass + " --check-perturb 1e-3");
    EXPECT_EQ(f32.exit_code, 1) << f32.out;
    EXPECT_NE(f32.out.find("CHECK pass=false"), std::string::npos) << f32.out;
    Ran bf16 = run_bench(base + " --dtype bfloat16 --bench-pass " + pass + " --check-perturb 0.05");
    EXPECT_EQ(bf16.exit_code, 1) << bf16.out;
  }
}

TEST(Cli, ListShowsEveryBackendAndWhatItRuns) {
  Ran r = run_bench("--list --quant-mode int8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want :
       {"  cpu: ", "  ref: ", "    pack           yes", "    expert_ffn     no: --quant-mode int8"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
}

TEST(Cli, HelpListsFlagsWithDefaults) {
  Ran r = run_bench("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--tokens", "--topk-list", "--remat-mode", "--capacity-policy", "--check", "--dump"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(r.out.find("32768"), std::string::npos);
}

}  // namespace
