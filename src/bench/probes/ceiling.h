// The ceiling every result row is measured against: a dense GEMM [T*K, H] x [H, 2M] (the fused up
// projection over all assignments) in the run's dtype, through the run's backend, in the same
// process, so a block's TF/s is also a ratio that survives a noisy or different machine.
//
// It is timed on its own terms, never with the run's --warmup/--iters (2 iterations once made it read
// half its real rate and pct_of_ceiling 137 %): the primitive is warmed, calls are batched into samples
// of >= 1 ms, samples run for >= `seconds` (and >= 5 of them), and the median sample sets the rate.
// The library's faster form for the dimensions (B as (H, 2M) or transposed) is the one timed.
// A GEMM under kMinCeilingFlops is not timed at all: its rate would be call overhead, not arithmetic.
//
// A sweep asks for the same ceiling many times: CeilingCache measures it once per key (--ceiling once).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "bench/harness/timing.h"
#include "bench/probes/bandwidth.h"
#include "bench/probes/machine_peaks.h"
#include "moe/backend.h"
#include "moe/config.h"
#include "moe/name_table.h"

namespace moe::bench {

constexpr double kMinCeilingFlops = 1 << 24;

struct Ceiling {
  std::optional<double> tflops;  // nullopt: too small to time, or off
  int samples = 0;
  double seconds = 0;  // the time the samples took
  bool off = false;    // --ceiling off: not measured
  // The dtype its GEMM multiplied: the run's, or float32 where the backend widens the run's bf16
  // (Backend::gemm_arithmetic); the note then ends in "+float32_arithmetic".
  Dtype arithmetic = Dtype::f32;
  bool widened = false;
  // The physical limit beside the library's: the CPU's register-resident peak for `arithmetic`
  // (cpu/gemm/peak.h) with the run's threads, where a run asks for it (--with-peak) on the cpu backend; the
  // int8 peak (TOP/s) for the routed int8 quant modes.
  std::optional<double> peak_tflops;
  // The memory roofline's peaks, for every cpu run whose ceiling is not off: streaming reads and streaming
  // writes of values and of zeros with the run's threads (bandwidth.h), GB/s (a row's bw_peak_gbps mixes
  // them by its traffic: accounting.h Traffic::mixed_gbps), and the arithmetic peak the run's bound is read
  // against (peak_tflops where --with-peak measured it, else the machine's kept one: machine_peaks.h).
  std::optional<double> read_peak_gbps, write_peak_gbps, zero_write_peak_gbps;
  std::optional<double> ridge_peak_tflops;
  // Where the bandwidth peaks come from (the row's bw_peak_source): "kept" (the machine's best so far),
  // "process" (--with-peak's probe at this process's start), and, set by the run (bench/harness/run.cpp),
  // "around_calls" (reads: the better of probes just before and after its calls) or "each_call" (a
  // memory-bound run's: the harmonic mean of a probe just before each timed call; writes of values and of
  // zeros probed so too where each is much of its traffic, else the process's).
  const char* bw_peak_source = "kept";
};

Ceiling measure_ceiling(Backend& backend, const MoeConfig& c, double seconds = 0.2);

// --ceiling: off (none), once (measured the first time a key is asked for, reused after), every-run.
enum class CeilingMode { off, once, every_run };
inline constexpr NameTable<CeilingMode, 3> kCeilingModes{
    {{{CeilingMode::off, "off"}, {CeilingMode::once, "once"}, {CeilingMode::every_run, "every-run"}}}};

// The ceilings of one process, keyed by what the ceiling GEMM depends on: its shape (T*K, H, 2M), the
// dtype, the backend, the OpenMP thread count and the backend's description (for cpu: the configured GEMM
// variant).
class CeilingCache {
 public:
  Ceiling get(CeilingMode mode, Backend& backend, const MoeConfig& c, bool with_peak = false);
  int measurements() const { return measurements_; }

 private:
  Ceiling measured(CeilingMode mode, Backend& backend, const MoeConfig& c);
  std::map<std::string, Ceiling> by_key_;
  MachinePeaks& machine_peaks(const std::string& tuning_file);
  std::map<std::string, std::optional<double>> peaks_;  // --with-peak's, by threads and arithmetic
  std::map<int, Bandwidth> bandwidths_;                 // --with-peak's, by threads
  std::map<std::string, MachinePeaks> machines_;        // by cache file
  int measurements_ = 0;
};

// Why a row's pct_of_ceiling reads as it does: "off" (--ceiling off), "ok" (<= 100 %),
// "too_small_to_time" (no ceiling), "above_short_run" (> 100 % from a run timed for under
// `short_run_seconds` in all: likely timing noise, raise --iters), "above_faster_than_dense" (> 100 %
// from a well-timed run: the block's GEMMs beat one dense GEMM of the ceiling's shape, e.g. per-expert
// GEMMs that fit in cache); "+float32_arithmetic" follows when the ceiling multiplied float32 because the
// machine has no arithmetic in the run's dtype, and "+memory_bound" when the memory roofline says bandwidth
// binds the run (its number to read is then pct_of_bw_peak, not pct_of_ceiling), and then "+above_bw_peak"
// (the row's, bench/harness/report.cpp) where it moved its bytes faster than the read probe reads: weights
// the caches kept, or a forward_backward's gradients written with streaming stores (at 1 token most of its
// bytes are zero gradients), which no probe bounds.
std::string ceiling_note(const Ceiling& ceiling, double pct_of_ceiling, const TimingStats& run,
                         bool memory_bound = false, double short_run_seconds = 0.2);

}  // namespace moe::bench
