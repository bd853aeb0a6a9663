// How OpenMP's threads wait at barriers and between parallel regions (issue "Every x86-64 CPU", item 9).
// Spinning wins on a quiet machine, but a thread that spins while the thread it waits for is
// descheduled burns the core that thread needs: on a busy 2-core VM a small run took 0.172 s a call
// spinning against 0.0018 s with passive waits. So the policy is chosen per process: measured (auto),
// forced (--wait-policy), or the user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT, which always win.
//
// libgomp reads those variables once, when it is loaded, before main: a policy chosen in main takes
// effect only in a new image of the process. apply_wait_policy sets the variables and executes this
// program again (same pid, same argv), with a marker that tells the new image what was chosen and why.
#pragma once

#include <functional>
#include <string>

#include "moe/status.h"

namespace moe::bench {

enum class WaitPolicy { automatic, spin, passive, bounded };
const char* name(WaitPolicy p);  // auto, spin, passive, bounded
Status parse_wait_policy(const std::string& text, WaitPolicy& out);

// bounded: spins (libgomp counts loop turns, ~0.1 us each here) before a thread sleeps on a futex: about
// a barrier's wait on a quiet machine, and short enough that a waiting thread gives its core back
// before the scheduler's next slice.
constexpr long kBoundedSpinCount = 10000;
// auto spins where every spinning thread of ours got at least kBusyCpuShare of its core (quiet), waits
// bounded where the least-served got at least kSharedCpuShare (shared: a VM's host takes a slice, steal
// 16-26 % on a 2-core Zen 5 guest, where passive waits cost a 1-token Qwen3-30B-A3B layer 15 % and a small
// block 27 % against bounded), and passive below it (busy: another runnable thread shares one of our
// cores, ~0.5 each, where bounded spins cost 4-5x passive: 2.95 against 0.54 ms a small block's call).
constexpr double kBusyCpuShare = 0.85;
constexpr double kSharedCpuShare = 0.6;
constexpr int kProbeMilliseconds = 50;

struct WaitChoice {
  WaitPolicy policy = WaitPolicy::bounded;  // never automatic once chosen
  // Why, without spaces (a RESULT line value): "flag", "auto:quiet:cpu_share=0.99",
  // "auto:shared:cpu_share=0.76", "auto:busy:cpu_share=0.41", "env:OMP_WAIT_POLICY=passive", "env:unset"
  // (libgomp's default).
  std::string reason = "unknown";
  // What libgomp must read for `policy` ("" = unset); for env:*, what it did read.
  std::string omp_wait_policy, gomp_spincount;
};

// The environment as seen by the choice (getenv, or a table in tests); nullptr = unset.
using EnvLookup = std::function<const char*(const char*)>;

// What libgomp does under the variables `env` holds (the user's, or ours after apply_wait_policy).
WaitChoice policy_of_environment(const EnvLookup& env);

// The CPU share (thread CPU time over wall time) of the least-served of `threads` threads that spin for
// `milliseconds` at once: ~1 where each has a core to itself, ~0.5 where each shares one.
double probe_cpu_share(int threads, int milliseconds = kProbeMilliseconds);

// The choice for a process: the user's OMP_WAIT_POLICY or GOMP_SPINCOUNT first, then a forced flag,
// then auto: spin when `probe()` (a cpu share) says our threads have their cores, bounded where a slice is
// taken from them, passive where they share them.
// `probe` is called only by auto. `warning` is set when the environment overrides a forced flag.
WaitChoice choose_wait_policy(WaitPolicy flag, const EnvLookup& env, const std::function<double()>& probe,
                              std::string* warning = nullptr);

// The variables that make libgomp run `c` differ from what this image was started with: it must be
// executed again.
bool needs_reexec(const WaitChoice& c, const EnvLookup& env);

// Sets the choice's variables and the marker, then executes /proc/self/exe with `argv`. Returns only
// when that fails (an error naming why); the caller then runs under the policy it has.
Status reexec_with(const WaitChoice& c, char** argv);

// In an image started by reexec_with: the choice it carried (and the marker and our variables are
// removed from the environment, so child processes see the user's). False elsewhere.
bool take_inherited_choice(WaitChoice& out);

// The policy this process runs under, for rows and logs: what set_process_wait_policy recorded, else
// what the environment says.
const WaitChoice& process_wait_policy();
void set_process_wait_policy(const WaitChoice& c);

// Settles this process's policy before anything else runs (MPI included): in an image reexec_with started,
// takes what it carries; else chooses (auto probes `threads` threads) and, where libgomp must read other
// variables, executes the program again, returning only where that failed (a warning line; the process
// then runs under the policy its environment gives). A warning line also where the environment overrides
// the flag.
void settle_wait_policy(WaitPolicy flag, int threads, char** argv);

// One line for humans: "passive (auto:busy:cpu_share=0.41)".
std::string describe(const WaitChoice& c);

}  // namespace moe::bench
