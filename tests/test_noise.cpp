// The machine-noise probe (src/bench/probes/noise.h): threads pushed off their cores make a run "busy"; an
// idle wait does not.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/harness/threads.h"
#include "bench/probes/noise.h"

namespace moe::bench {
namespace {

TEST(Noise, ThreadsSwitchedOutMakeARunBusy) {
  const int cores = available_cores();
  const NoiseProbe probe;
  // Four spinning threads per core: each is pushed off its core at every scheduler tick.
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 4 * cores; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  stop = true;
  for (std::thread& t : spinners) t.join();
  const MachineNoise n = probe.finish(0.4, 1, cores);
  EXPECT_GT(n.involuntary_switches, 0);
  EXPECT_EQ(n.note.rfind("busy:", 0), 0u) << n.note;
  EXPECT_NE(n.note.find("switched_out_per_s="), std::string::npos) << n.note;
  EXPECT_EQ(n.note.find(' '), std::string::npos) << "a RESULT line value: " << n.note;
}

TEST(Noise, AnIdleWaitIsNotSwitchedOut) {
  const NoiseProbe probe;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const MachineNoise n = probe.finish(0.05, 1, available_cores());
  EXPECT_EQ(n.note.find("switched_out_per_s"), std::string::npos) << n.note;
  EXPECT_GE(n.load_avg_1m, 0.0) << "/proc/loadavg is readable on Linux";
}

}  // namespace
}  // namespace moe::bench
