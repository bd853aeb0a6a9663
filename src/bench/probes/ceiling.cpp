#include "bench/probes/ceiling.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "bench/probes/bandwidth.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/peak.h"
#include "moe/backend.h"
#include "moe/tensor.h"

namespace moe::bench {
namespace {

constexpr double kWarmSeconds = 0.02;
constexpr double kSampleSeconds = 1e-3;  // each sample batches calls up to this long
constexpr size_t kMinSamples = 5;

template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Timed {
  double median = 0;
  int samples = 0;
  double seconds = 0;
};

// Calls `call` until it is warm (the first call creates the primitive) and returns the time of one call.
template <typename Fn>
double warm(Fn&& call) {
  double per_call = seconds_of(call);
  for (double spent = 0; spent < kWarmSeconds; spent += per_call) per_call = seconds_of(call);
  return per_call;
}

// Samples of batched calls for `budget` seconds and at least `min_samples` samples (unless those
// would take over 5 x the budget: a GEMM of seconds is stable in fewer).
template <typename Fn>
Timed sample(Fn&& call, double per_call, double budget, size_t min_samples) {
  const int batch = std::max(1, int(std::ceil(kSampleSeconds / std::max(per_call, 1e-9))));
  std::vector<double> samples;
  Timed t;
  while (t.seconds < budget || (samples.size() < min_samples && t.seconds < 5 * budget)) {
    const double s = seconds_of([&] {
      for (int i = 0; i < batch; ++i) call();
    });
    samples.push_back(s / batch);
    t.seconds += s;
  }
  t.median = summarize(samples).median;
  t.samples = int(samples.size());
  return t;
}

}  // namespace

Ceiling measure_ceiling(Backend& backend, const MoeConfig& c, double seconds) {
  const int64_t R = c.assignments(), Kd = c.hidden, N = 2 * c.mlp_dim;
  const double flops = 2.0 * double(R) * double(Kd) * double(N);
  const Dtype arithmetic = backend.gemm_arithmetic(c.dtype);
  Ceiling ceiling;
  ceiling.arithmetic = arithmetic;
  ceiling.widened = arithmetic != c.dtype;
  if (flops < kMinCeilingFlops) return ceiling;
  Tensor a_host(arithmetic, {R, Kd}), b_host(arithmetic, {Kd, N});
  for (int64_t i = 0; i < a_host.numel(); ++i) a_host.set(i, double((i * 7919) % 1000) * 1e-3 - 0.5);
  for (int64_t i = 0; i < b_host.numel(); ++i) b_host.set(i, double((i * 104729) % 1000) * 1e-3 - 0.5);
  const Tensor a = backend.to_device(a_host), b = backend.to_device(b_host);
  Tensor out = backend.empty(arithmetic, {R, N});
  // The one place the ceiling calls a GEMM: the run's backend, b read as (Kd, N) or, transposed,
  // (N, Kd); each call waits for the device, so an asynchronous backend is timed for its work.
  auto gemm = [&](bool trans_b) {
    return [&, trans_b] {
      backend.dense_gemm(out, a, b, trans_b);
      backend.synchronize();
    };
  };
  auto plain = gemm(false), transposed = gemm(true);
  const double plain_call = warm(plain), transposed_call = warm(transposed);
  const bool use_transposed = sample(transposed, transposed_call, seconds / 10, 2).median <
                              sample(plain, plain_call, seconds / 10, 2).median;
  const Timed t = use_transposed ? sample(transposed, transposed_call, seconds, kMinSamples)
                                 : sample(plain, plain_call, seconds, kMinSamples);
  ceiling.tflops = flops / t.median / 1e12;
  ceiling.samples = t.samples;
  ceiling.seconds = t.seconds;
  return ceiling;
}

Ceiling CeilingCache::get(CeilingMode mode, Backend& backend, const MoeConfig& c, bool with_peak) {
  Ceiling ceiling = measured(mode, backend, c);
  if (ceiling.off || std::string(backend.name()) != "cpu") return ceiling;
  // The routed int8 modes' expert GEMMs multiply int8: their peak is the CPU's int8 one.
  const Dtype arithmetic = routed_int8(c.quant_mode) ? Dtype::s8 : backend.gemm_arithmetic(c.dtype);
  const int threads = omp_get_max_threads();
  MachinePeaks& machine = machine_peaks(backend.kernel().tuning_file);
  if (!with_peak) {
    ceiling.read_peak_gbps = machine.read_gbps(threads);
    ceiling.write_peak_gbps = machine.write_gbps(threads);
    ceiling.zero_write_peak_gbps = machine.zero_write_gbps(threads);
    ceiling.ridge_peak_tflops = machine.arithmetic_tflops(threads, arithmetic);
    return ceiling;
  }
  // Measured in this process, once per thread count and arithmetic, and kept for the machine.
  const std::string key = fmt::format("threads={} {}", threads, dtype_name(arithmetic));
  auto it = peaks_.find(key);
  if (it == peaks_.end()) {
    // Then the best this machine reached (machine_peaks.h): a core the host takes during the ~0.1 s this
    // measurement lasts halves it (a sweep's bf16 rows read 165 % of a peak measured so, 2-core Zen 4).
    machine.remember_arithmetic(threads, arithmetic, cpu::best_peak(cpu::measure_peaks(threads), arithmetic));
    it = peaks_.emplace(key, machine.arithmetic_tflops(threads, arithmetic)).first;
  }
  ceiling.peak_tflops = ceiling.ridge_peak_tflops = it->second;
  auto bw = bandwidths_.find(threads);
  if (bw == bandwidths_.end()) {
    bw = bandwidths_.emplace(threads, measure_bandwidth(threads)).first;
    machine.remember_read_gbps(threads, bw->second.read_gbps);
    machine.remember_write_gbps(threads, bw->second.write_gbps);
    machine.remember_zero_write_gbps(threads, bw->second.zero_write_gbps);
  }
  ceiling.read_peak_gbps = bw->second.read_gbps;
  ceiling.write_peak_gbps = bw->second.write_gbps;
  ceiling.zero_write_peak_gbps = bw->second.zero_write_gbps;
  ceiling.bw_peak_source = "process";
  return ceiling;
}

MachinePeaks& CeilingCache::machine_peaks(const std::string& tuning_file) {
  const std::string path = MachinePeaks::path_beside_tuning_file(tuning_file);
  return machines_.try_emplace(path, path).first->second;
}

Ceiling CeilingCache::measured(CeilingMode mode, Backend& backend, const MoeConfig& c) {
  if (mode == CeilingMode::off) {
    Ceiling off;
    off.off = true;
    return off;
  }
  const std::string key =
      fmt::format("{}x{}x{} {} {} threads={} {}", c.assignments(), c.hidden, 2 * c.mlp_dim,
                  dtype_name(c.dtype), backend.name(), omp_get_max_threads(), backend.description());
  auto it = by_key_.find(key);
  if (it != by_key_.end() && mode == CeilingMode::once) return it->second;
  ++measurements_;
  return by_key_[key] = measure_ceiling(backend, c);
}

std::string ceiling_note(const Ceiling& ceiling, double pct_of_ceiling, const TimingStats& run,
                         bool memory_bound, double short_run_seconds) {
  if (ceiling.off) return "off";
  const std::string arithmetic =
      std::string(ceiling.widened ? "+float32_arithmetic" : "") + (memory_bound ? "+memory_bound" : "");
  if (!ceiling.tflops) return "too_small_to_time" + arithmetic;
  if (pct_of_ceiling <= 100) return "ok" + arithmetic;
  double timed = 0;
  for (double s : run.samples) timed += s;
  return (timed < short_run_seconds ? "above_short_run" : "above_faster_than_dense") + arithmetic;
}

}  // namespace moe::bench
