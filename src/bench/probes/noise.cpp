#include "bench/probes/noise.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace moe::bench {
namespace {

// A run is called busy when, per second of timed calls, its threads were switched out more often than
// this: on a quiet 2-core VM a block's 2 threads see a few per second (timer housekeeping); with one
// competing process they see hundreds.
constexpr double kBusySwitchesPerThreadSecond = 20;
constexpr double kBusyStealPct = 2;

int64_t involuntary_switches() {
  rusage u{};
  return getrusage(RUSAGE_SELF, &u) == 0 ? int64_t(u.ru_nivcsw) : 0;
}

// The aggregate "cpu" line of /proc/stat: steal and the sum of every column (in ticks).
bool read_cpu_ticks(uint64_t& steal, uint64_t& total) {
  std::ifstream in("/proc/stat");
  std::string line;
  if (!std::getline(in, line) || line.rfind("cpu ", 0) != 0) return false;
  std::istringstream cols(line.substr(4));
  uint64_t v = 0, i = 0;
  steal = total = 0;
  for (; cols >> v; ++i) {
    total += v;
    if (i == 7) steal = v;  // user nice system idle iowait irq softirq steal ...
  }
  return i > 7;
}

double load_average_1m() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

}  // namespace

NoiseProbe::NoiseProbe() {
  switches_at_start_ = involuntary_switches();
  have_stat_ = read_cpu_ticks(steal_at_start_, total_at_start_);
}

MachineNoise NoiseProbe::finish(double timed_seconds, int threads, int cores) const {
  MachineNoise n;
  n.load_avg_1m = load_average_1m();
  n.involuntary_switches = involuntary_switches() - switches_at_start_;
  n.involuntary_per_s = timed_seconds > 0 ? double(n.involuntary_switches) / timed_seconds : 0;
  uint64_t steal = 0, total = 0;
  if (have_stat_ && read_cpu_ticks(steal, total) && total > total_at_start_)
    n.steal_pct = 100.0 * double(steal - steal_at_start_) / double(total - total_at_start_);
  std::string signs;
  auto add = [&](const std::string& s) { signs += (signs.empty() ? "" : ",") + s; };
  if (n.involuntary_per_s > kBusySwitchesPerThreadSecond * threads)
    add(fmt::format("switched_out_per_s={:.0f}", n.involuntary_per_s));
  if (n.steal_pct > kBusyStealPct) add(fmt::format("steal_pct={:.1f}", n.steal_pct));
  // The load average counts our own threads; more than the cores beside them means others ran too.
  if (n.load_avg_1m > double(cores) + 0.5 && n.load_avg_1m > double(threads) + 0.5)
    add(fmt::format("load_avg_1m={:.2f}_on_{}_cores", n.load_avg_1m, cores));
  if (!signs.empty()) n.note = "busy:" + signs;
  return n;
}

}  // namespace moe::bench
