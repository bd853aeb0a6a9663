// What the machine was doing while a run was timed, so a reader knows which numbers to distrust: a
// laptop or a shared server is busy, and 2 OpenMP threads spinning at barriers while one of them is
// descheduled made a small run 100x slower (issue "Every x86-64 CPU", item 9).
//
// A NoiseProbe is started before the first timed call and read after the last: the process's
// involuntary context switches (each one a thread of ours pushed off its core by someone else), the
// machine's steal time (a hypervisor running others on our vCPUs) from /proc/stat, and the 1-minute
// load average, which counts our own running threads too.
#pragma once

#include <cstdint>
#include <string>

namespace moe::bench {

struct MachineNoise {
  double load_avg_1m = -1;           // -1: unknown
  int64_t involuntary_switches = 0;  // of this process, during the timed calls
  double involuntary_per_s = 0;
  double steal_pct = -1;  // of all CPU time during the timed calls; -1: unknown
  // "quiet", or "busy:" and the signs that said so (no spaces: a RESULT line value).
  std::string note = "quiet";
};

class NoiseProbe {
 public:
  NoiseProbe();  // starts counting
  // threads: the run's OpenMP threads (each may be switched out); cores: those it may use.
  MachineNoise finish(double timed_seconds, int threads, int cores) const;

 private:
  int64_t switches_at_start_ = 0;
  uint64_t steal_at_start_ = 0, total_at_start_ = 0;
  bool have_stat_ = false;
};

}  // namespace moe::bench
