#include "bench/probes/wait_policy.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

namespace moe::bench {
namespace {

constexpr const char* kWaitVar = "OMP_WAIT_POLICY";
constexpr const char* kSpinVar = "GOMP_SPINCOUNT";
// Set only by reexec_with, read and removed by the image it starts: "policy;reason".
constexpr const char* kMarkerVar = "MOE_WAIT_POLICY_CHOSEN";
// libgomp's spin count where neither variable is set (its env.c).
constexpr const char* kLibgompDefaultSpins = "300000";

double seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The variables that make libgomp wait as `p` says.
void set_variables(WaitChoice& c) {
  c.omp_wait_policy = c.gomp_spincount = "";
  if (c.policy == WaitPolicy::spin) c.omp_wait_policy = "active";
  if (c.policy == WaitPolicy::passive) c.omp_wait_policy = "passive";
  if (c.policy == WaitPolicy::bounded) c.gomp_spincount = std::to_string(kBoundedSpinCount);
}

std::string value_of(const EnvLookup& env, const char* var) {
  const char* v = env(var);
  return v ? v : "";
}

}  // namespace

const char* name(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::automatic:
      return "auto";
    case WaitPolicy::spin:
      return "spin";
    case WaitPolicy::passive:
      return "passive";
    case WaitPolicy::bounded:
      return "bounded";
  }
  return "?";
}

Status parse_wait_policy(const std::string& text, WaitPolicy& out) {
  for (WaitPolicy p : {WaitPolicy::automatic, WaitPolicy::spin, WaitPolicy::passive, WaitPolicy::bounded})
    if (text == name(p)) {
      out = p;
      return Status::ok();
    }
  return Status::error(
      fmt::format("invalid --wait-policy '{}': expected one of auto, spin, passive, bounded", text));
}

WaitChoice policy_of_environment(const EnvLookup& env) {
  WaitChoice c;
  c.omp_wait_policy = value_of(env, kWaitVar);
  c.gomp_spincount = value_of(env, kSpinVar);
  const std::string wait = lower(c.omp_wait_policy);
  // libgomp: GOMP_SPINCOUNT, where given, is the spin count whatever OMP_WAIT_POLICY says; "infinite"
  // spins forever.
  if (!c.gomp_spincount.empty()) {
    const std::string spins = lower(c.gomp_spincount);
    c.policy = spins == "0"                                 ? WaitPolicy::passive
               : spins == "infinite" || spins == "infinity" ? WaitPolicy::spin
                                                            : WaitPolicy::bounded;
  } else if (wait == "active") {
    c.policy = WaitPolicy::spin;
  } else if (wait == "passive") {
    c.policy = WaitPolicy::passive;
  } else {
    c.policy = WaitPolicy::bounded;  // libgomp's default: 300000 spins, then sleep
  }
  std::string why;
  for (const auto& [var, value] : {std::pair{kWaitVar, &c.omp_wait_policy}, {kSpinVar, &c.gomp_spincount}})
    if (!value->empty()) why += fmt::format("{}env:{}={}", why.empty() ? "" : ",", var, *value);
  c.reason = why.empty() ? fmt::format("env:unset(libgomp_spincount={})", kLibgompDefaultSpins) : why;
  // A RESULT line value holds no spaces.
  std::replace(c.reason.begin(), c.reason.end(), ' ', '_');
  return c;
}

double probe_cpu_share(int threads, int milliseconds) {
  MOE_CHECK(threads >= 1 && milliseconds > 0, "a probe of at least one thread");
  std::vector<double> share(size_t(threads), 0.0);
  auto spin = [&share, milliseconds](int i) {
    const double wall0 = seconds(CLOCK_MONOTONIC), cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    double wall = wall0;
    while (wall - wall0 < 1e-3 * milliseconds) wall = seconds(CLOCK_MONOTONIC);
    share[size_t(i)] = (seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0) / (wall - wall0);
  };
  std::vector<std::thread> others;
  // A thread the system will not start is set_thread_count's error to report (one line, exit 2), not
  // the probe's: it measures the threads it has.
  try {
    for (int i = 1; i < threads; ++i) others.emplace_back(spin, i);
  } catch (const std::system_error&) {
  }
  spin(0);
  for (std::thread& t : others) t.join();
  return std::min(1.0, *std::min_element(share.begin(), share.begin() + 1 + ptrdiff_t(others.size())));
}

WaitChoice choose_wait_policy(WaitPolicy flag, const EnvLookup& env, const std::function<double()>& probe,
                              std::string* warning) {
  if (env(kWaitVar) != nullptr || env(kSpinVar) != nullptr) {
    WaitChoice c = policy_of_environment(env);
    if (flag != WaitPolicy::automatic && warning != nullptr)
      *warning = fmt::format("--wait-policy {} ignored: {} in the environment wins", name(flag), c.reason);
    return c;
  }
  WaitChoice c;
  if (flag != WaitPolicy::automatic) {
    c.policy = flag;
    c.reason = "flag";
  } else {
    const double share = probe();
    c.policy = share >= kBusyCpuShare     ? WaitPolicy::spin
               : share >= kSharedCpuShare ? WaitPolicy::bounded
                                          : WaitPolicy::passive;
    const char* machine = c.policy == WaitPolicy::spin      ? "quiet"
                          : c.policy == WaitPolicy::bounded ? "shared"
                                                            : "busy";
    c.reason = fmt::format("auto:{}:cpu_share={:.2f}", machine, share);
  }
  set_variables(c);
  return c;
}

bool needs_reexec(const WaitChoice& c, const EnvLookup& env) {
  return c.omp_wait_policy != value_of(env, kWaitVar) || c.gomp_spincount != value_of(env, kSpinVar);
}

Status reexec_with(const WaitChoice& c, char** argv) {
  for (const auto& [var, value] : {std::pair{kWaitVar, &c.omp_wait_policy}, {kSpinVar, &c.gomp_spincount}})
    if (value->empty() ? unsetenv(var) != 0 : setenv(var, value->c_str(), 1) != 0)
      return Status::error(fmt::format("cannot set {}: {}", var, std::strerror(errno)));
  if (setenv(kMarkerVar, fmt::format("{};{}", name(c.policy), c.reason).c_str(), 1) != 0)
    return Status::error(fmt::format("cannot set {}: {}", kMarkerVar, std::strerror(errno)));
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  const Status failed = Status::error(fmt::format("cannot execute /proc/self/exe: {}", std::strerror(errno)));
  for (const char* var : {kWaitVar, kSpinVar, kMarkerVar}) unsetenv(var);
  return failed;
}

bool take_inherited_choice(WaitChoice& out) {
  const char* marker = std::getenv(kMarkerVar);
  if (marker == nullptr) return false;
  const std::string text = marker;
  unsetenv(kMarkerVar);
  const size_t semi = text.find(';');
  WaitChoice c;
  if (semi == std::string::npos || !parse_wait_policy(text.substr(0, semi), c.policy) ||
      c.policy == WaitPolicy::automatic)
    return false;
  c.reason = text.substr(semi + 1);
  set_variables(c);
  // Only what reexec_with set: anything else is the user's environment, described as such.
  if (needs_reexec(c, [](const char* v) { return std::getenv(v); })) return false;
  for (const char* var : {kWaitVar, kSpinVar}) unsetenv(var);
  out = c;
  return true;
}

namespace {
std::optional<WaitChoice>& process_slot() {
  static std::optional<WaitChoice> slot;
  return slot;
}
}  // namespace

const WaitChoice& process_wait_policy() {
  std::optional<WaitChoice>& slot = process_slot();
  if (!slot) slot = policy_of_environment([](const char* v) { return std::getenv(v); });
  return *slot;
}

void set_process_wait_policy(const WaitChoice& c) {
  process_slot() = c;
}

void settle_wait_policy(WaitPolicy flag, int threads, char** argv) {
  const EnvLookup env = [](const char* v) { return std::getenv(v); };
  // A second image never executes a third, whatever its environment says.
  const bool second_image = env(kMarkerVar) != nullptr;
  WaitChoice c;
  if (take_inherited_choice(c)) {
    set_process_wait_policy(c);
    return;
  }
  std::string warning;
  c = choose_wait_policy(
      flag, env, [threads] { return probe_cpu_share(threads); }, &warning);
  if (!warning.empty()) fmt::print(stderr, "moe-bench: warning: {}\n", warning);
  if (!second_image && needs_reexec(c, env)) {
    const Status failed = reexec_with(c, argv);
    WaitChoice actual = policy_of_environment(env);
    fmt::print(stderr, "moe-bench: warning: OpenMP wait policy {} not applied ({}): running {}\n",
               describe(c), failed.message(), describe(actual));
    actual.reason += ",reexec_failed";
    c = actual;
  }
  set_process_wait_policy(c);
}

std::string describe(const WaitChoice& c) {
  return fmt::format("{} ({})", name(c.policy), c.reason);
}

}  // namespace moe::bench
