// The per-machine tuning file behind the kernel table's `auto` (FFTW's wisdom is the model): for each
// (ISA level, GEMM libraries, threads) of this CPU and each GEMM form and shape class, the variant that
// measured fastest, so later processes take it without measuring. One JSON object:
//   {"format": "moe-bench tuning 1", "cpu_model": "...", "entries": {"KEY": {"variant": "onednn",
//    "seconds": {"onednn": 0.0012, "portable": 0.0031}, "date": "..."}}}
// KEY = "isa=avx2 threads=2 wait=spin libs=... | nn bfloat16->bfloat16 Kd=1024 N=2048 E=16 rows<=1024
// parts=2". Where: KernelConfig::tuning_file (--tuning-file), else MOE_TUNING_FILE, else $XDG_CACHE_HOME (or
// ~/.cache)/moe-bench/tuning.json. A file that cannot be read, does not parse as ours, or was made on
// another CPU model is ignored with one warning line on stderr and never written over: this process
// then keeps what it measures in memory. Entries naming a variant that does not run here are never
// taken (the table only takes variants of its own rows). Writes merge under the file's lock, so
// processes sharing the file (ctest -j) add to it; an entry another process wrote first is kept unless
// this process re-measures (--tune).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "moe/tensor.h"

namespace moe {

// auto's measurement of one shape class's n candidates; call(i) runs candidate i once on the call's own
// operands and returns its seconds. Each candidate's first call warms it (primitives, scratch) and its
// second is timed, unless the first took 8x the best first call (it cannot win). Those within 1.6x of
// the best then get up to two more timed calls, in turns (reversed every other round, so a machine
// slowing down or speeding up favours none), while those extra calls stay under 3 seconds in all.
// Returns each candidate's fastest timed call (the hopeless one's first). On this project's shared
// 2-core machines one timed call each picked the slower of two kernels 5-10 % apart about one time in
// three; contention only ever slows a call, so the fastest call is the kernel's speed.
std::vector<double> time_candidates(size_t n, const std::function<double(size_t)>& call);

// Twice the last-level cache, read before each of auto's timed calls of a few-row class (kernel_table.cpp's
// weights_come_cold), so that a candidate meets its weights where the block's call meets them: in memory.
// Between two calls of one GEMM a block runs its other GEMMs (the up projection's weights pass between two
// down calls), so a call whose operands would fit the cache finds them cold there; back to back they came
// from L3, where at one row an expert (Qwen3-30B-A3B's down at T 1: 8 experts, 25 MB) oneDNN's nn edged out
// gemv's, 0.750 against 0.773 ms, while in the block gemv's made the forward 20-25 % faster (2-core Zen 4).
// On a Zen 5 guest the read does not make them cold: its L3 kept part of them (25 MB read at 78-86 GB/s
// against a 52 GB/s probe, with 64-256 MB read or written between calls, or chunks read twice), and there
// oneDNN's nn timed 6-16 % under gemv's on kept weights at Qwen3-30B-A3B's 1-token down (0.40-0.47 against
// 0.46-0.53 ms in 9 tunings) while in the block it ran 0.56-0.68 against gemv's 0.31-0.53. On weights kept
// across calls gemv reads its own packing at 0.89-0.96 of a sequential read (onednn 0.41-0.77, dpbf16
// 0.43-0.68: moe_bench_few_rows, the same Zen 5), so a few-row class on kept weights keeps the faster of the
// variants that read their own packing of them (gemv; amx, whose B tiles read 0.84-0.94 of a read at one row
// on an AMX Xeon, where gemv's tile order read 0.64-0.69) unless another candidate beat it by more than
// kColdMargin (pick_candidate). On weights read in place the measurement decides alone (there oneDNN's 1-row
// nn read 0.75-0.77 of a read against gemv's 0.65-0.66).
constexpr double kColdMargin = 1.25;

// The candidate auto keeps from their times: the fastest, but `preferred` (where given) unless the fastest
// took under 1 / kColdMargin of its time.
size_t pick_candidate(const std::vector<double>& times, std::optional<size_t> preferred);

struct GemmCall;
// Few rows an expert: a call whose time is reading weights (gemv takes up to gemv_max_rows(kept), where from
// 33 rows the arithmetic counts as much).
constexpr int64_t kFewRows = 32;
// Whether auto measures a call with its operands out of the caches (CacheEvictor): a grouped call of at most
// kFewRows rows an expert, whose time is reading weights, which a block's call meets in memory (other GEMMs
// ran since its last call). With more rows its activations count as much, and a block's call meets those warm
// (the op before it just wrote them): such calls are measured back to back.
bool weights_come_cold(const GemmCall& call);
// Among the candidates `names` of `call`, timed `times`, the one pick_candidate prefers: on a cold call's
// kept weights, the faster of gemv and amx.
std::optional<size_t> preferred_candidate(const GemmCall& call, const std::vector<std::string>& names,
                                          const std::vector<double>& times);

// The last-level cache a thread of cpu 0 shares (sysfs; glibc's sysconf reports the host's total in some VMs:
// 320 MiB on a 2-core guest whose L3 is 32 MiB), within [16, 256] MiB; 32 MiB where neither says.
size_t last_level_cache_bytes();
// The L2 cache of cpu 0 (sysfs, else sysconf), within [256 KiB, 8 MiB]; 1 MiB where neither says.
size_t core_l2_cache_bytes();

class CacheEvictor {
 public:
  CacheEvictor();  // allocates the buffer, first touched by the threads that read it
  void evict() const;

 private:
  Buffer<uint64_t> words_;
};

class GemmTuner {
 public:
  // path: the file ("" : none, choices stay in memory). retune: every class is measured again once in
  // this process and replaces the file's entry. wait_policy: how the process's OpenMP threads wait
  // (KernelConfig::wait_policy), in the key where given.
  GemmTuner(std::string path, bool retune, std::string wait_policy = "");

  // kernel.tuning_file if given, else MOE_TUNING_FILE, else the XDG cache's moe-bench/tuning.json ("" if
  // neither XDG_CACHE_HOME nor HOME is set).
  static std::string resolve_path(const std::string& tuning_file);

  const std::string& path() const { return path_; }
  bool retune() const { return retune_; }
  // The variant stored for this machine (ISA level, libraries, the current thread count) and class, where
  // its measurement timed every one of `candidates` (the variants that take the class now): an entry made
  // before a variant came to take the class (gemv from 33 rows, say) is stale, and the class measured again.
  std::optional<std::string> lookup(const std::string& shape_class,
                                    const std::vector<std::string>& candidates);
  // Keeps a measurement: in memory, and in the file when it is ours (replacing a stale entry of the class).
  void record(const std::string& shape_class, const std::string& variant,
              const std::vector<std::pair<std::string, double>>& seconds);

 private:
  std::string key(const std::string& shape_class) const;
  void load();
  void warn(const std::string& why);

  std::string path_;
  bool retune_;
  std::string wait_policy_;
  bool loaded_ = false;
  bool writable_ = true;  // false once the file proved unreadable, corrupt or foreign
  struct Entry {
    std::string variant;
    std::set<std::string> timed;  // the candidates its measurement timed
  };
  std::map<std::string, Entry> entries_;  // by key
  std::set<std::string> measured_here_;   // keys this process measured (retune)
};

}  // namespace moe
