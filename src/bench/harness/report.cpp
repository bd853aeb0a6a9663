#include "bench/harness/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "bench/harness/accounting.h"
#include "bench/probes/ceiling.h"
#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe::bench {

const char* name(OutputFormat f) {
  return kOutputFormats.name(f);
}

namespace {

std::string csv_field(const nlohmann::ordered_json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// The fields of a csv line as csv_field quotes them; -1 when a quote is left open (a torn row).
int64_t csv_fields(std::string_view line) {
  int64_t fields = 1;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;  // "" inside a quoted field toggles twice
    if (c == ',' && !quoted) ++fields;
  }
  return quoted ? -1 : fields;
}

}  // namespace

// Our keys appended to the text RESULT line; jsonl/csv rows carry everything.
static const std::vector<std::string> kTextExtraKeys = {"dtype",
                                                        "time_s",
                                                        "time_median_s",
                                                        "time_min_s",
                                                        "time_max_s",
                                                        "time_stddev_s",
                                                        "ceiling_tflops",
                                                        "pct_of_ceiling",
                                                        "ceiling_note",
                                                        "peak_tflops",
                                                        "pct_of_peak",
                                                        "bytes_moved",
                                                        "gbps",
                                                        "bw_peak_gbps",
                                                        "bw_read_peak_gbps",
                                                        "bw_write_peak_gbps",
                                                        "bw_zero_write_peak_gbps",
                                                        "bw_peak_source",
                                                        "pct_of_bw_peak",
                                                        "bound",
                                                        "roofline_s",
                                                        "pct_of_roofline",
                                                        "saved_activation_bytes",
                                                        "tensor_bytes_live",
                                                        "tensor_bytes_peak",
                                                        "timed_allocations",
                                                        "threads",
                                                        "noise_note",
                                                        "wait_policy",
                                                        "wait_policy_reason",
                                                        "world_size",
                                                        "mesh_data",
                                                        "mesh_expert",
                                                        "tflops_per_rank",
                                                        "comm_s",
                                                        "comm_transfer_s",
                                                        "comm_wait_s",
                                                        "comm_bytes",
                                                        "comm_gbps",
                                                        "modeled_comm_bytes",
                                                        "comm_peak_gbps",
                                                        "pct_of_comm_peak",
                                                        "remat_mode",
                                                        "capacity_policy",
                                                        "shared_expert_dim",
                                                        "tokens",
                                                        "hidden",
                                                        "mlp_dim",
                                                        "experts",
                                                        "model",
                                                        "device",
                                                        "device_model",
                                                        "matmul_precision",
                                                        "repeats",
                                                        "run_id",
                                                        "gemm_variant",
                                                        "gemm_kernels",
                                                        "isa",
                                                        "cpu_model",
                                                        "cpu_id"};

// Text RESULT values are one word each (a seed parser splits on spaces): "AMD EPYC 7B13" -> AMD_EPYC_7B13.
static std::string spaces_to_underscores(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

// One value of a text RESULT line.
static std::string text_value(const ResultRow& v) {
  return v.is_number_float() ? fmt::format("{:.6f}", v.get<double>())
         : v.is_string()     ? spaces_to_underscores(v.get<std::string>())
         : v.is_null()       ? "none"  // no ceiling: the GEMM was too small to time
                             : v.dump();
}

std::string result_text(const ResultRow& r) {
  std::string line = fmt::format(
      "RESULT distribution={} mode={} pass={} impl={} backend={} topk={} null_target={:.3f} "
      "null_realized={:.3f} "
      "null_mode={} null_assignments={} real_assignments={} tflops={:.6f} tokens_per_s={:.6f}",
      r["distribution"].get<std::string>(), r["mode"].get<std::string>(), r["pass"].get<std::string>(),
      r["impl"].get<std::string>(), r["backend"].get<std::string>(), r["topk"].get<int64_t>(),
      r["null_target"].get<double>(), r["null_realized"].get<double>(), r["null_mode"].get<std::string>(),
      r["null_assignments"].get<int64_t>(), r["real_assignments"].get<int64_t>(), r["tflops"].get<double>(),
      r["tokens_per_s"].get<double>());
  for (const std::string& k : kTextExtraKeys) {
    const auto& v = r[k];
    line += " " + k + "=" + text_value(v);
  }
  // The quant modes' keys (the int8 branch prints quant_mode; ours are the rest).
  if (r.contains("quant_mode") && r["quant_mode"] != "none")
    line += " quant_mode=" + text_value(r["quant_mode"]);
  for (const char* k : {"int8_backward", "quant_rel_err", "quant_grad_rel_err"})
    if (r.contains(k)) line += std::string(" ") + k + "=" + text_value(r[k]);
  return line;
}

namespace {

ResultRow number_or_null(const std::optional<double>& v) {
  return v ? ResultRow(*v) : ResultRow(nullptr);
}

// The seed's RESULT keys, then our timing statistics.
void add_seed_keys(ResultRow& r, const MoeConfig& c, const Measured& m, double tflops) {
  const TimingStats& t = m.time;
  r["distribution"] = name(c.distribution);
  r["mode"] = m.mode;
  r["pass"] = name(c.bench_pass);
  r["impl"] = name(c.impl);
  r["backend"] = name(c.gemm_backend);
  r["topk"] = c.topk;
  r["null_target"] = m.null_stats.target;
  r["null_realized"] = m.null_stats.realized;
  r["null_mode"] = name(c.null_routing.mode);
  r["null_assignments"] = m.null_stats.null_assignments;
  r["real_assignments"] = m.null_stats.real_assignments;
  r["tflops"] = tflops;
  r["tokens_per_s"] = double(c.tokens) / t.mean;
  r["dtype"] = dtype_name(c.dtype);
  r["time_s"] = t.mean;
  r["time_median_s"] = t.median;
  r["time_min_s"] = t.min;
  r["time_max_s"] = t.max;
  r["time_stddev_s"] = t.stddev;
}

// What a row's numbers are read against: the seed's FLOPs, the bytes the call must move, and the memory
// roofline's verdict on them.
struct Demand {
  double flops;
  Traffic traffic;
  std::optional<bool> memory_bound;
};

Demand demand_of(const MoeConfig& c, const Measured& m) {
  const double flops = seed_flops(c, m.null_stats.real_assignments);
  const Traffic traffic = compulsory_traffic(c, m.experts_touched);
  return {flops, traffic, memory_bound(traffic, flops, m.ceiling)};
}

// What the run is measured against (the dense ceiling, the ISA peak), its memory, and the machine's state.
void add_limits_and_machine(ResultRow& r, const Demand& d, const Measured& m, double tflops) {
  const std::optional<double>& ceiling = m.ceiling.tflops;
  const double pct = ceiling ? 100.0 * tflops / *ceiling : 0.0;
  r["ceiling_tflops"] = number_or_null(ceiling);
  r["pct_of_ceiling"] = ceiling ? ResultRow(pct) : ResultRow(nullptr);
  r["ceiling_note"] = ceiling_note(m.ceiling, pct, m.time, d.memory_bound.value_or(false));
  r["saved_activation_bytes"] = m.saved_activation_bytes;
  r["tensor_bytes_live"] = m.memory.live_bytes;
  r["tensor_bytes_peak"] = m.memory.peak_bytes;
  r["timed_allocations"] = m.memory.allocations;
  const std::optional<double> peak = m.ceiling.peak_tflops;
  r["peak_tflops"] = number_or_null(peak);
  r["pct_of_peak"] = peak ? ResultRow(100.0 * tflops / *peak) : ResultRow(nullptr);
  r["threads"] = m.threads;
  r["noise_note"] = m.noise.note;
  r["load_avg_1m"] = m.noise.load_avg_1m;
  r["involuntary_switches"] = m.noise.involuntary_switches;
  r["steal_pct"] = m.noise.steal_pct;
  r["wait_policy"] = name(m.wait.policy);
  r["wait_policy_reason"] = m.wait.reason;
}

// The memory roofline: the bytes a call must move, the rate it moved them at, the bandwidth peak (reads and
// writes mixed by the call's traffic) and which peak binds (memory_bound).
void add_memory_roofline(ResultRow& r, const MoeConfig& c, const Demand& d, const Measured& m) {
  const double gbps = d.traffic.bytes() / m.time.mean / 1e9;
  r["bytes_moved"] = int64_t(d.traffic.bytes());
  r["gbps"] = gbps;
  const std::optional<double> bw = bw_peak_gbps(d.traffic, m.ceiling);
  r["bw_peak_gbps"] = number_or_null(bw);
  r["bw_read_peak_gbps"] = number_or_null(m.ceiling.read_peak_gbps);
  r["bw_write_peak_gbps"] = number_or_null(m.ceiling.write_peak_gbps);
  r["bw_zero_write_peak_gbps"] = number_or_null(m.ceiling.zero_write_peak_gbps);
  r["bw_peak_source"] = bw ? ResultRow(m.ceiling.bw_peak_source) : ResultRow(nullptr);
  r["pct_of_bw_peak"] = bw ? ResultRow(100.0 * gbps / *bw) : ResultRow(nullptr);
  const std::optional<bool>& memory = d.memory_bound;
  r["bound"] = memory ? ResultRow(*memory ? "memory" : "compute") : ResultRow(nullptr);
  // Past the probes where memory binds: say so beside the ceiling's verdict (ceiling.h).
  if (bw && memory.value_or(false) && gbps > *bw)
    r["ceiling_note"] = r["ceiling_note"].get<std::string>() + "+above_bw_peak";
  const std::optional<double> peak = m.ceiling.ridge_peak_tflops;
  const bool roofline = bw && peak && !m.expert_rows.empty();
  const double roofline_s =
      roofline ? roofline_seconds(c, m.expert_rows, *bandwidth_peaks(m.ceiling), *peak) : 0.0;
  r["roofline_s"] = roofline ? ResultRow(roofline_s) : ResultRow(nullptr);
  r["pct_of_roofline"] = roofline ? ResultRow(100.0 * roofline_s / m.time.mean) : ResultRow(nullptr);
}

// The ranks and what moved between them.
void add_parallel(ResultRow& r, const MoeConfig& c, const ParallelMeasure& pm, double tflops) {
  r["world_size"] = pm.world_size;
  r["mesh_data"] = pm.mesh_data;
  r["mesh_expert"] = pm.mesh_expert;
  r["rank_layout"] = pm.rank_layout;
  r["tflops_per_rank"] = tflops / double(pm.world_size);
  r["comm_s"] = pm.comm_s;
  r["comm_transfer_s"] = pm.comm_transfer_s;
  r["comm_wait_s"] = pm.comm_wait_s;
  r["comm_bytes"] = pm.comm_bytes;
  // The rate the bytes moved at: over the transfer time, not the wait for a later rank's compute.
  r["comm_gbps"] = pm.comm_transfer_s > 0 ? ResultRow(double(pm.comm_bytes) / pm.comm_transfer_s / 1e9)
                                          : ResultRow(nullptr);
  r["modeled_comm_bytes"] = pm.modeled_comm_bytes;
  r["ep_overlap"] = c.ep_overlap;  // in every row (the config's JSON has it only where it is not 1)
  auto positive_or_null = [](double v) { return v > 0 ? ResultRow(v) : ResultRow(nullptr); };
  r["comm_peak_a2a_gbps"] = positive_or_null(pm.peak_a2a_gbps);
  r["comm_peak_allreduce_gbps"] = positive_or_null(pm.peak_reduce_gbps);
  r["comm_peak_gbps"] =
      positive_or_null(pm.ideal_comm_s > 0 ? double(pm.comm_bytes) / pm.ideal_comm_s / 1e9 : 0);
  r["pct_of_comm_peak"] =
      positive_or_null(pm.comm_transfer_s > 0 ? 100.0 * pm.ideal_comm_s / pm.comm_transfer_s : 0);
}

// The kernels that ran and, for the quant modes, how they differentiate and how far they are from float.
void add_kernels_and_quant(ResultRow& r, const MoeConfig& c, const KernelConfig& k, const Measured& m) {
  r["device_model"] = m.device_model;
  r["gemm_kernels"] = m.gemm_kernels.empty() ? "none" : m.gemm_kernels;
  r["gemm_thresholds"] = k.thresholds.to_text();
  // How the int8 GEMMs differentiate (docs/design.md "Int8"): the seed's custom rule for prequant, our
  // straight-through estimator where the seed's autodiff had no backward GEMMs (and AQT's, with round to
  // nearest even, for the shared expert's).
  if (any_int8_gemm(c))
    r["int8_backward"] = c.quant_mode == QuantMode::int8_routed_prequant ? "seed_vjp" : "ste";
  if (c.quant_mode != QuantMode::none) {
    r["quant_rel_err"] = number_or_null(m.quant_rel_err);
    r["quant_grad_rel_err"] = number_or_null(m.quant_grad_rel_err);
  }
}

// The full config, kernel config and environment (keys the row has already are not repeated), the
// protocol, the run's identity and every timed call, block by block.
void add_config_and_protocol(ResultRow& r, const MoeConfig& c, const KernelConfig& k, const Protocol& p,
                             const Measured& m, const Environment& env) {
  for (const std::string& extra : {c.to_json(), k.to_json(), env.to_json()}) {
    const ResultRow fields = ResultRow::parse(extra);
    for (auto it = fields.begin(); it != fields.end(); ++it)
      if (!r.contains(it.key())) r[it.key()] = it.value();
  }
  r["iters"] = p.iters;
  r["warmup"] = p.warmup;
  r["repeats"] = p.repeats;
  r["run_id"] = run_id(c, k, p, m.mode);
  r["row_schema"] = kRowSchema;
  r["command"] = p.command;
  // Which published layer the shape is (a sweep over --model lists several); later shape flags may have
  // changed it, which the shape's own keys say.
  r["model"] = p.model.empty() ? ResultRow(nullptr) : ResultRow(p.model);
  const TimingStats& t = m.time;
  ResultRow blocks = ResultRow::array();
  const size_t per_block = t.samples.size() / size_t(std::max(1, t.blocks));
  for (size_t i = 0; i < t.samples.size(); ++i) {
    if (per_block == 0 || i % per_block == 0) blocks.push_back(ResultRow::array());
    blocks.back().push_back(t.samples[i]);
  }
  r["samples_s"] = blocks;
}

}  // namespace

ResultRow make_row(const MoeConfig& c, const KernelConfig& k, const Protocol& p, const Measured& m,
                   const Environment& env) {
  const Demand d = demand_of(c, m);
  const double tflops = d.flops / m.time.mean / 1e12;
  ResultRow r;
  add_seed_keys(r, c, m, tflops);
  add_limits_and_machine(r, d, m, tflops);
  add_memory_roofline(r, c, d, m);
  add_parallel(r, c, m.parallel, tflops);
  add_kernels_and_quant(r, c, k, m);
  add_config_and_protocol(r, c, k, p, m, env);
  return r;
}

std::string format_jsonl(const ResultRow& row) {
  return row.dump();
}

// csv holds the scalar keys: samples_s (an array per --repeats block) is for jsonl.
std::string csv_header(const ResultRow& row) {
  std::string s;
  for (auto it = row.begin(); it != row.end(); ++it)
    if (it.value().is_primitive()) s += (s.empty() ? "" : ",") + it.key();
  return s;
}

std::string format_csv(const ResultRow& row) {
  std::string s;
  bool first = true;
  for (auto it = row.begin(); it != row.end(); ++it) {
    if (!it.value().is_primitive()) continue;
    if (!first) s += ',';
    s += csv_field(it.value());
    first = false;
  }
  return s;
}

std::string check_line(const MoeConfig& c, const ConditionedCheck& r) {
  const std::string grad_err = r.grad_rel_err < 0 ? "none" : fmt::format("{:.3e}", r.grad_rel_err);
  return fmt::format(
      "CHECK pass={} out_rel_err={:.3e} grad_rel_err={} tol={:.1e} worst={} distribution={} topk={} impl={} "
      "bench_pass={}",
      r.pass ? "true" : "false", r.out_rel_err, grad_err, r.worst.tol, r.worst.name, name(c.distribution),
      c.topk, name(c.impl), name(c.bench_pass));
}

void add_check_fields(ResultRow& row, const ConditionedCheck& r) {
  row["check_pass"] = r.pass;
  row["check_out_rel_err"] = r.out_rel_err;
  row["check_grad_rel_err"] = r.grad_rel_err;
  row["check_tol"] = r.worst.tol;
  row["check_worst"] = r.worst.name;
}

std::vector<std::string> format_rows(OutputFormat format, const std::vector<ResultRow>& rows) {
  std::vector<std::string> lines;
  for (const ResultRow& row : rows) {
    switch (format) {
      case OutputFormat::text:
        lines.push_back(result_text(row));
        break;
      case OutputFormat::jsonl:
        lines.push_back(format_jsonl(row));
        break;
      case OutputFormat::csv:
        lines.push_back(format_csv(row));
        break;
    }
  }
  return lines;
}

std::string file_header(OutputFormat format, const ResultRow& row) {
  return format == OutputFormat::csv ? csv_header(row) : "";
}

RowTest row_test(OutputFormat format, const std::string& header) {
  switch (format) {
    case OutputFormat::text:
      return {};
    case OutputFormat::jsonl:
      return [](std::string_view line) {
        return json_depth(line) <= kMaxJsonDepth && ResultRow::parse(line, nullptr, false).is_object();
      };
    case OutputFormat::csv:
      return [fields = csv_fields(header)](std::string_view line) { return csv_fields(line) == fields; };
  }
  MOE_CHECK(false, "unknown output format");
  return {};
}

Status append_rows(const std::string& path, OutputFormat format, const std::vector<ResultRow>& rows) {
  if (rows.empty()) return Status::ok();
  const std::string header = file_header(format, rows.front());
  return append_lines(path, header, format_rows(format, rows), "results file", row_test(format, header));
}

std::optional<BandwidthPeaks> bandwidth_peaks(const Ceiling& ceiling) {
  const std::optional<double> read = ceiling.read_peak_gbps;
  if (!read) return std::nullopt;
  const double write = ceiling.write_peak_gbps.value_or(*read);
  return BandwidthPeaks{*read, write, ceiling.zero_write_peak_gbps.value_or(write)};
}

std::optional<double> bw_peak_gbps(const Traffic& traffic, const Ceiling& ceiling) {
  const std::optional<BandwidthPeaks> bw = bandwidth_peaks(ceiling);
  if (!bw) return std::nullopt;
  return traffic.mixed_gbps(*bw);
}

std::optional<bool> memory_bound(const Traffic& traffic, double flops, const Ceiling& ceiling) {
  const std::optional<double> bw = bw_peak_gbps(traffic, ceiling), peak = ceiling.ridge_peak_tflops;
  if (!bw || !peak) return std::nullopt;
  const double intensity = flops / traffic.bytes();
  return intensity < *peak * 1e12 / (*bw * 1e9);
}

}  // namespace moe::bench
