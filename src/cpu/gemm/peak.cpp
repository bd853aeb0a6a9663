#include "cpu/gemm/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "moe/cpu_isa.h"

namespace moe::cpu {
namespace {

using Loop = double (*)(int64_t);

struct PeakKernel {
  const char* name;
  Dtype arithmetic;
  IsaLevel needs;
  Loop loop;
  bool CpuIsa::*also_needs = nullptr;  // a CPU feature outside the level's own set, if any
};

constexpr PeakKernel kKernels[] = {
    {"f32_fma_avx2", Dtype::f32, IsaLevel::avx2, &isa_avx2::peak_loop_f32_fma},
    {"int8_avx2", Dtype::s8, IsaLevel::avx2, &isa_avx2::peak_loop_int8},
    {"int8_vnni_avx2", Dtype::s8, IsaLevel::avx2, &isa_avx2::peak_loop_int8_vnni, &CpuIsa::avx_vnni},
    {"f32_fma_avx512", Dtype::f32, IsaLevel::avx512, &isa_avx512_bf16::peak_loop_f32_fma},
    {"bf16_dp_avx512", Dtype::bf16, IsaLevel::avx512_bf16, &isa_avx512_bf16::peak_loop_bf16_dp},
    {"int8_vnni_avx512", Dtype::s8, IsaLevel::avx512_bf16, &isa_avx512_bf16::peak_loop_int8_vnni},
    {"bf16_amx", Dtype::bf16, IsaLevel::amx, &isa_amx::peak_loop_bf16},
    {"int8_amx", Dtype::s8, IsaLevel::amx, &isa_amx::peak_loop_int8},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// All threads run `steps` of the loop at once; the rate is their work over the region's wall time.
double parallel_rate(Loop loop, int64_t steps, int threads) {
  double ops = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : ops)
  ops += loop(steps);
  return ops / seconds_since(t0);
}

}  // namespace

std::vector<ArithmeticPeak> measure_peaks(int threads, double seconds) {
  std::vector<ArithmeticPeak> peaks;
  for (const PeakKernel& k : kKernels) {
    if (isa_level() < k.needs || (k.also_needs && !(cpu_isa().*k.also_needs))) continue;
    // Calibrate on one thread until a run is long enough to time, then size the measured runs.
    int64_t steps = 1 << 10;
    double took = 0;
    while (true) {
      const auto t0 = std::chrono::steady_clock::now();
      k.loop(steps);
      took = seconds_since(t0);
      if (took > 2e-3 || steps > (int64_t(1) << 40)) break;
      steps *= 4;
    }
    const int64_t measured_steps = std::max<int64_t>(1, int64_t(double(steps) * seconds / 3 / took));
    double best = 0;
    for (int run = 0; run < 3; ++run) best = std::max(best, parallel_rate(k.loop, measured_steps, threads));
    peaks.push_back({k.name, k.arithmetic, best / 1e12});
  }
  return peaks;
}

std::optional<double> best_peak(const std::vector<ArithmeticPeak>& peaks, Dtype arithmetic) {
  std::optional<double> best;
  for (const ArithmeticPeak& p : peaks)
    if (p.arithmetic == arithmetic && (!best || p.tera_per_s > *best)) best = p.tera_per_s;
  return best;
}

}  // namespace moe::cpu
