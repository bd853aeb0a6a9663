// The OpenMP wait policy (src/bench/probes/wait_policy.h): the user's environment wins over a forced flag,
// which wins over auto; auto spins only where our threads have their cores; the policy chosen is the
// one libgomp runs (its OMP_DISPLAY_ENV report of the image that ran), and every row says which and why.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench/harness/report.h"
#include "bench/harness/threads.h"
#include "bench/probes/wait_policy.h"
#include "test_util.h"

namespace moe::bench {
namespace {

using moe::testing::Ran;
using moe::testing::run_command;
using moe::testing::split_lines;

EnvLookup table(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* v) -> const char* {
    auto it = vars.find(v);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A probe that must not run.
double no_probe() {
  ADD_FAILURE() << "probed although the policy was given";
  return 1;
}

TEST(WaitPolicy, ParsesItsNamesAndRefusesOthers) {
  for (WaitPolicy p : {WaitPolicy::automatic, WaitPolicy::spin, WaitPolicy::passive, WaitPolicy::bounded}) {
    WaitPolicy back = WaitPolicy::automatic;
    ASSERT_TRUE(parse_wait_policy(name(p), back).is_ok()) << name(p);
    EXPECT_EQ(back, p);
  }
  WaitPolicy p = WaitPolicy::spin;
  const Status bad = parse_wait_policy("active", p);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.message(), "invalid --wait-policy 'active': expected one of auto, spin, passive, bounded");
  EXPECT_EQ(p, WaitPolicy::spin) << "a refused value leaves the policy alone";
}

TEST(WaitPolicy, AForcedFlagSetsWhatLibgompReads) {
  const EnvLookup none = table({});
  const WaitChoice spin = choose_wait_policy(WaitPolicy::spin, none, no_probe);
  EXPECT_EQ(spin.policy, WaitPolicy::spin);
  EXPECT_EQ(spin.reason, "flag");
  EXPECT_EQ(spin.omp_wait_policy, "active");
  EXPECT_EQ(spin.gomp_spincount, "");
  const WaitChoice passive = choose_wait_policy(WaitPolicy::passive, none, no_probe);
  EXPECT_EQ(passive.omp_wait_policy, "passive");
  const WaitChoice bounded = choose_wait_policy(WaitPolicy::bounded, none, no_probe);
  EXPECT_EQ(bounded.omp_wait_policy, "");
  EXPECT_EQ(bounded.gomp_spincount, std::to_string(kBoundedSpinCount));
  for (const WaitChoice& c : {spin, passive, bounded}) EXPECT_TRUE(needs_reexec(c, none)) << describe(c);
  EXPECT_FALSE(needs_reexec(spin, table({{"OMP_WAIT_POLICY", "active"}})));
  EXPECT_TRUE(needs_reexec(spin, table({{"OMP_WAIT_POLICY", "active"}, {"GOMP_SPINCOUNT", "5"}})));
}

TEST(WaitPolicy, AutoSpinsOnlyWhereOurThreadsHaveTheirCores) {
  const EnvLookup none = table({});
  const WaitChoice quiet = choose_wait_policy(WaitPolicy::automatic, none, [] { return 0.99; });
  EXPECT_EQ(quiet.policy, WaitPolicy::spin);
  EXPECT_EQ(quiet.reason, "auto:quiet:cpu_share=0.99");
  const WaitChoice busy = choose_wait_policy(WaitPolicy::automatic, none, [] { return 0.41; });
  EXPECT_EQ(busy.policy, WaitPolicy::passive);
  EXPECT_EQ(busy.reason, "auto:busy:cpu_share=0.41");
  EXPECT_EQ(busy.omp_wait_policy, "passive");
  const WaitChoice edge = choose_wait_policy(WaitPolicy::automatic, none, [] { return kBusyCpuShare; });
  EXPECT_EQ(edge.policy, WaitPolicy::spin) << "the threshold's own share is not busy";
  // A slice taken by the VM's host (steal), no thread sharing our cores: spin briefly, then sleep.
  const WaitChoice shared = choose_wait_policy(WaitPolicy::automatic, none, [] { return 0.76; });
  EXPECT_EQ(shared.policy, WaitPolicy::bounded);
  EXPECT_EQ(shared.reason, "auto:shared:cpu_share=0.76");
  EXPECT_EQ(shared.gomp_spincount, std::to_string(kBoundedSpinCount));
  const WaitChoice shared_edge =
      choose_wait_policy(WaitPolicy::automatic, none, [] { return kSharedCpuShare; });
  EXPECT_EQ(shared_edge.policy, WaitPolicy::bounded) << "the threshold's own share is not busy";
}

TEST(WaitPolicy, TheUsersEnvironmentWinsOverTheFlagAndAuto) {
  std::string warning;
  const WaitChoice c =
      choose_wait_policy(WaitPolicy::spin, table({{"OMP_WAIT_POLICY", "passive"}}), no_probe, &warning);
  EXPECT_EQ(c.policy, WaitPolicy::passive);
  EXPECT_EQ(c.reason, "env:OMP_WAIT_POLICY=passive");
  EXPECT_EQ(warning, "--wait-policy spin ignored: env:OMP_WAIT_POLICY=passive in the environment wins");
  EXPECT_FALSE(needs_reexec(c, table({{"OMP_WAIT_POLICY", "passive"}})));

  struct Case {
    std::map<std::string, std::string> env;
    WaitPolicy policy;
    std::string reason;
  };
  const Case cases[] = {
      {{{"OMP_WAIT_POLICY", "ACTIVE"}}, WaitPolicy::spin, "env:OMP_WAIT_POLICY=ACTIVE"},
      {{{"GOMP_SPINCOUNT", "0"}}, WaitPolicy::passive, "env:GOMP_SPINCOUNT=0"},
      {{{"GOMP_SPINCOUNT", "5000"}}, WaitPolicy::bounded, "env:GOMP_SPINCOUNT=5000"},
      {{{"GOMP_SPINCOUNT", "infinite"}}, WaitPolicy::spin, "env:GOMP_SPINCOUNT=infinite"},
      // libgomp: the spin count, where given, decides whatever the policy says.
      {{{"OMP_WAIT_POLICY", "active"}, {"GOMP_SPINCOUNT", "100"}},
       WaitPolicy::bounded,
       "env:OMP_WAIT_POLICY=active,env:GOMP_SPINCOUNT=100"},
  };
  for (const Case& k : cases) {
    std::string w;
    const WaitChoice e = choose_wait_policy(WaitPolicy::automatic, table(k.env), no_probe, &w);
    EXPECT_EQ(e.policy, k.policy) << k.reason;
    EXPECT_EQ(e.reason, k.reason);
    EXPECT_EQ(w, "") << "auto is not overridden, only given way to";
  }
  const WaitChoice unset = policy_of_environment(table({}));
  EXPECT_EQ(unset.policy, WaitPolicy::bounded) << "libgomp's default spins 300000 turns, then sleeps";
  EXPECT_EQ(unset.reason, "env:unset(libgomp_spincount=300000)");
}

// The second image takes its choice from the marker and gives the user's environment back to its own
// children; a marker that does not match the variables is not believed.
TEST(WaitPolicy, TheReexecutedImageTakesItsChoiceAndCleansUp) {
  const char* saved = std::getenv("OMP_WAIT_POLICY");
  const std::string saved_value = saved ? saved : "";
  setenv("MOE_WAIT_POLICY_CHOSEN", "passive;auto:busy:cpu_share=0.30", 1);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  unsetenv("GOMP_SPINCOUNT");
  WaitChoice c;
  EXPECT_TRUE(take_inherited_choice(c));
  EXPECT_EQ(c.policy, WaitPolicy::passive);
  EXPECT_EQ(c.reason, "auto:busy:cpu_share=0.30");
  EXPECT_EQ(std::getenv("MOE_WAIT_POLICY_CHOSEN"), nullptr);
  EXPECT_EQ(std::getenv("OMP_WAIT_POLICY"), nullptr);

  setenv("MOE_WAIT_POLICY_CHOSEN", "spin;flag", 1);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  EXPECT_FALSE(take_inherited_choice(c));
  EXPECT_EQ(std::getenv("MOE_WAIT_POLICY_CHOSEN"), nullptr);
  EXPECT_STREQ(std::getenv("OMP_WAIT_POLICY"), "passive") << "not ours: left as it was";
  EXPECT_FALSE(take_inherited_choice(c)) << "no marker";

  if (saved)
    setenv("OMP_WAIT_POLICY", saved_value.c_str(), 1);
  else
    unsetenv("OMP_WAIT_POLICY");
}

TEST(WaitPolicy, TheProbeSeesCoresTakenByOthers) {
  const int cores = available_cores();
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 4 * cores; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const double share = probe_cpu_share(cores);
  stop = true;
  for (std::thread& t : spinners) t.join();
  // Five runnable threads per core: each of ours gets about a fifth of one (busy: passive waits).
  EXPECT_LT(share, kSharedCpuShare);
  EXPECT_GT(share, 0.0);
}

TEST(WaitPolicy, EveryRowCarriesThePolicyAndWhy) {
  MoeConfig c;
  Measured m;
  m.time = summarize({0.5});
  m.null_stats.real_assignments = c.assignments();
  m.wait = choose_wait_policy(WaitPolicy::automatic, table({}), [] { return 0.5; });
  const ResultRow row = make_row(c, KernelConfig{}, Protocol{}, m, Environment{});
  EXPECT_EQ(row["wait_policy"], "passive");
  EXPECT_EQ(row["wait_policy_reason"], "auto:busy:cpu_share=0.50");
  const std::string text = result_text(row);
  EXPECT_NE(text.find(" wait_policy=passive wait_policy_reason=auto:busy:cpu_share=0.50"), std::string::npos)
      << text;
}

// moe-bench itself, with the test environment's OMP_WAIT_POLICY removed: what libgomp read in the image
// that ran (OMP_DISPLAY_ENV prints it as each image loads), the stderr log and the row agree.
struct Image {
  std::string wait, spins;  // libgomp's report of the last image
  int images = 0;
};

// "  OMP_WAIT_POLICY = 'PASSIVE'" (libgomp of GCC 12) or "  [host] OMP_WAIT_POLICY = 'PASSIVE'" (GCC 13 on,
// which names the device a value is for): the value of `name`, or nothing where the line is another's.
std::optional<std::string> display_env_value(const std::string& line, const std::string& name) {
  static const std::regex setting(R"(^\s+(\[[a-z]+\]\s+)?([A-Z_]+) = '(.*)'$)");
  std::smatch m;
  if (!std::regex_match(line, m, setting) || m[2] != name) return std::nullopt;
  return m[3].str();
}

Image last_image(const std::string& err) {
  Image im;
  for (const std::string& line : split_lines(err)) {
    if (line.find("OPENMP DISPLAY ENVIRONMENT BEGIN") != std::string::npos) ++im.images;
    if (auto v = display_env_value(line, "OMP_WAIT_POLICY")) im.wait = *v;
    if (auto v = display_env_value(line, "GOMP_SPINCOUNT")) im.spins = *v;
  }
  return im;
}

const char* kRun =
    " --tokens 33 --hidden 16 --mlp-dim 12 --experts 4 --topk 2 --iters 1 --warmup 0 --threads 2"
    " --distribution random --impl fused_w13 --ceiling off --format jsonl";

Ran run_clean(const std::string& env, const std::string& args) {
  return run_command("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose " + env + " " +
                     MOE_BENCH_BINARY + kRun + " --verbose " + args);
}

TEST(WaitPolicyCli, AForcedPolicyIsTheOneLibgompRuns) {
  struct Case {
    std::string flag, wait, spins;
  };
  for (const Case& k : {Case{"spin", "ACTIVE", "30000000000"}, Case{"passive", "PASSIVE", "0"},
                        Case{"bounded", "PASSIVE", std::to_string(kBoundedSpinCount)}}) {
    const Ran r = run_clean("", "--wait-policy " + k.flag);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Image im = last_image(r.err);
    EXPECT_EQ(im.images, 2) << "chosen in main, so run by a second image: " << r.err;
    EXPECT_EQ(im.wait, k.wait) << k.flag;
    EXPECT_EQ(im.spins, k.spins) << k.flag;
    const auto row = nlohmann::json::parse(r.out);
    EXPECT_EQ(row["wait_policy"], k.flag);
    EXPECT_EQ(row["wait_policy_reason"], "flag");
    EXPECT_NE(r.err.find("OpenMP waits " + k.flag + " (flag)"), std::string::npos) << r.err;
  }
}

TEST(WaitPolicyCli, AutoRunsWhatItChose) {
  const Ran r = run_clean("", "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = nlohmann::json::parse(r.out);
  const std::string policy = row["wait_policy"], reason = row["wait_policy_reason"];
  EXPECT_EQ(reason.rfind("auto:", 0), 0u) << reason;
  const Image im = last_image(r.err);
  EXPECT_EQ(im.images, 2);
  if (policy == "spin") {
    EXPECT_EQ(im.spins, "30000000000");
    EXPECT_EQ(reason.rfind("auto:quiet:", 0), 0u) << reason;
  } else if (policy == "bounded") {
    EXPECT_EQ(im.spins, std::to_string(kBoundedSpinCount));
    EXPECT_EQ(reason.rfind("auto:shared:", 0), 0u) << reason;
  } else {
    EXPECT_EQ(policy, "passive");
    EXPECT_EQ(im.spins, "0");
    EXPECT_EQ(reason.rfind("auto:busy:", 0), 0u) << reason;
  }
}

TEST(WaitPolicyCli, TheUsersEnvironmentWinsWithOneWarning) {
  const Ran r = run_clean("OMP_WAIT_POLICY=passive", "--wait-policy spin");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Image im = last_image(r.err);
  EXPECT_EQ(im.images, 1) << "nothing to change: no second image";
  EXPECT_EQ(im.spins, "0");
  const auto row = nlohmann::json::parse(r.out);
  EXPECT_EQ(row["wait_policy"], "passive");
  EXPECT_EQ(row["wait_policy_reason"], "env:OMP_WAIT_POLICY=passive");
  EXPECT_NE(r.err.find("moe-bench: warning: --wait-policy spin ignored: env:OMP_WAIT_POLICY=passive in the "
                       "environment wins\n"),
            std::string::npos)
      << r.err;
}

TEST(WaitPolicyCli, ABadValueIsOneLineAndExitTwo) {
  for (const char* bad : {"--wait-policy active", "--wait-policy ''", "--wait-policy spin,passive"}) {
    const Ran r = run_command(std::string(MOE_BENCH_BINARY) + kRun + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.out, "") << bad;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line for " << bad << ": " << r.err;
    EXPECT_EQ(r.err.rfind("moe-bench: error: ", 0), 0u) << r.err;
  }
}

TEST(WaitPolicyCli, ListSaysWhatARunWouldChoose) {
  const Ran r = run_command(std::string("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ") + MOE_BENCH_BINARY +
                            " --list --wait-policy passive --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("openmp wait policy (--wait-policy passive, 2 threads): a run now would wait passive "
                       "(flag)\n"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace moe::bench
