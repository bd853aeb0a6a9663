#include "bench/harness/list.h"

#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>

#include "bench/harness/models.h"
#include "bench/probes/bandwidth.h"
#include "bench/probes/machine_peaks.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/peak.h"
#include "cpu/gemm/tuning.h"
#include "moe/backend.h"
#include "moe/cpu_isa.h"

namespace moe::bench {

void print_peaks(const KernelConfig& kernel) {
  const CpuIsa& cpu = cpu_isa();
  const int threads = omp_get_max_threads();
  fmt::print("cpu: {} (isa level {}), {} threads\n", cpu.model, isa_level_name(cpu.level()), threads);
  fmt::print("{:<16} {:>10}  {}\n", "peak", "tera/s", "multiplies");
  const std::vector<cpu::ArithmeticPeak> peaks = cpu::measure_peaks(threads);
  for (const cpu::ArithmeticPeak& p : peaks)
    fmt::print("{:<16} {:>10.3f}  {}\n", p.name, p.tera_per_s, dtype_name(p.arithmetic));
  // The memory roofline's peaks (bench/probes/bandwidth.h): GB/s, reading, streaming writes and STREAM's
  // triad.
  const Bandwidth bw = measure_bandwidth(threads);
  // What rows read their bound against from now on (machine_peaks.h).
  MachinePeaks machine(MachinePeaks::path_beside_tuning_file(kernel.tuning_file));
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::s8})
    machine.remember_arithmetic(threads, dt, cpu::best_peak(peaks, dt));
  machine.remember_read_gbps(threads, bw.read_gbps);
  machine.remember_write_gbps(threads, bw.write_gbps);
  machine.remember_zero_write_gbps(threads, bw.zero_write_gbps);
  fmt::print("{:<16} {:>10.1f}  GB/s, streaming reads\n", "memory_read", bw.read_gbps);
  fmt::print("{:<16} {:>10.1f}  GB/s, streaming (non-temporal) writes\n", "memory_write", bw.write_gbps);
  fmt::print("{:<16} {:>10.1f}  GB/s, streaming writes of zeros\n", "memory_write_0", bw.zero_write_gbps);
  fmt::print("{:<16} {:>10.1f}  GB/s, triad a = b + s * c (24 bytes an element)\n", "memory_triad",
             bw.triad_gbps);
}

void print_list(const MoeConfig& c, const KernelConfig& kernel, WaitPolicy wait, int threads) {
  const CpuIsa& cpu = cpu_isa();
  fmt::print("cpu: {}\n  isa level: {} (detected {}{})\n  extensions: {}\n", cpu.model,
             isa_level_name(cpu.level()), isa_level_name(cpu.detected),
             cpu.capped_by_env ? fmt::format(", held to {} by MOE_MAX_ISA", isa_level_name(cpu.cap)) : "",
             cpu.extensions());
  std::string warning;
  const WaitChoice w = choose_wait_policy(
      wait, [](const char* v) { return std::getenv(v); }, [threads] { return probe_cpu_share(threads); },
      &warning);
  fmt::print("openmp wait policy (--wait-policy {}, {} threads): a run now would wait {}{}\n", name(wait),
             threads, describe(w), warning.empty() ? "" : "; " + warning);
  fmt::print("backends (--device; first = default), for this configuration:\n");
  for (const std::string& device : registered_backend_names()) {
    const std::unique_ptr<Backend> b = make_backend(device, kernel);
    fmt::print("  {}: {}\n", b->name(), b->description());
    for (OpKind op : kAllOps) {
      const Status s = b->supports(op, c);
      fmt::print("    {:<14} {}\n", name(op), s ? "yes" : "no: " + s.message());
    }
  }
  fmt::print("impls:");
  for (Impl i : kAllImpls) fmt::print(" {}", name(i));
  fmt::print(" {} (the seed's DP baseline, not in 'both')", name(Impl::ref_dp));
  fmt::print(
      "\ngrouped_gemm backends: gmm (contiguous layout, tile-padded groups) ragged_dot (exact groups)\n");
  fmt::print("models (--model; hidden, mlp-dim, experts, topk, shared-expert-dim):\n");
  for (const ModelPreset& m : model_presets())
    fmt::print("  {:<17} {:>5} {:>6} {:>4} {:>2} {:>5}  {}\n", m.name, m.hidden, m.mlp_dim, m.experts, m.topk,
               m.shared_expert_dim, m.source);
  fmt::print(
      "gemm variants of the cpu backend (--gemm-variant; auto = the fastest per GEMM form and shape class, "
      "measured once per machine and kept in {}):\n",
      [] {
        const std::string p = GemmTuner::resolve_path("");
        return p.empty() ? std::string("memory (no MOE_TUNING_FILE, XDG_CACHE_HOME or HOME)") : p;
      }());
  for (const GemmVariant& v : gemm_variants()) {
    const std::string why = v.unavailable();
    const bool float_forms = !std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn)]);
    fmt::print("  {}: {}\n    here: {}\n", v.name, v.description,
               why.empty() ? fmt::format("runs ({}; {})", v.version(),
                                         !float_forms          ? "int8 only"
                                         : v.bf16_arithmetic() ? "bf16 multiplied as bf16"
                                                               : "bf16 widened to float32")
                           : "no: " + why);
  }
  // The table this configuration's runs use here, row by row (--gemm-variant's first).
  const GemmKernels table(kernel, nullptr);
  fmt::print("gemm kernel table here (rows in order without measurements; {}):\n",
             kernel.thresholds.to_text());
  for (const GemmRow& r : table.rows())
    fmt::print("  {:<15} {:<9} isa {:<12} {}\n", name(r.form), r.variant->name,
               isa_level_name(r.variant->isa), r.dtypes());
  fmt::print("routing_pack_strategy: argsort tuple_sort expert_score_sort\n");
  fmt::print("dispatch_permute_mode: direct_take repeat_sort\ncombine: scatter unsort\n");
}

}  // namespace moe::bench
