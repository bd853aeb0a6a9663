// Result rows: one per (run, queue mode). The seed's RESULT line is the text form; jsonl and csv
// rows carry the same keys plus the full config and the environment (git commit, CPU, ISA,
// threads, library versions, date), so a row can be traced without the command that made it.
//
// Files are appended row by row under a lock (moe/file_io.h append_lines), so concurrent runs lose
// no row and a killed run leaves no half row.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness/accounting.h"
#include "bench/harness/run_id.h"
#include "bench/harness/timing.h"
#include "bench/probes/ceiling.h"
#include "bench/probes/noise.h"
#include "bench/probes/wait_policy.h"
#include "moe/conditioned_check.h"
#include "moe/config.h"
#include "moe/environment.h"
#include "moe/file_io.h"
#include "moe/name_table.h"
#include "moe/null_routing.h"
#include "moe/status.h"

namespace moe::bench {

enum class OutputFormat { text, jsonl, csv };
inline constexpr NameTable<OutputFormat, 3> kOutputFormats{
    {{{OutputFormat::text, "text"}, {OutputFormat::jsonl, "jsonl"}, {OutputFormat::csv, "csv"}}}};
const char* name(OutputFormat f);

// Keys in insertion order; values keep their JSON type (numbers stay numbers in jsonl).
using ResultRow = nlohmann::ordered_json;

// What a run over several ranks adds to its rows (one rank: world_size 1, no communication).
struct ParallelMeasure {
  int world_size = 1;
  int mesh_data = 1, mesh_expert = 1;  // the ranks as a data x expert mesh
  std::string rank_layout;             // "r0:tokens=[0,18) experts=[0,4);r1:..." (moe/parallel.h)
  double comm_s = 0;                   // per call: the slowest rank's time inside collectives
  // Per call: the most time any rank's collectives took to move their bytes (each timed as its comm's
  // last arrival's: measure_comm_transfer), and the most any rank waited in them for a later rank.
  double comm_transfer_s = 0, comm_wait_s = 0;
  int64_t comm_bytes = 0;          // per call: the most any rank sent to other ranks
  int64_t modeled_comm_bytes = 0;  // per call and rank: the comm path's model (modeled_comm_bytes)
  // The busbw (GB/s) an all-to-all and an all-reduce of the step's largest messages reach alone
  // (measure_comm_peak; the slowest group's, 0 where the step had none), and the seconds per call the
  // step's bytes would take at them (the slowest rank's).
  double peak_a2a_gbps = 0, peak_reduce_gbps = 0;
  double ideal_comm_s = 0;
};

// One queue mode of a run as measured.
struct Measured {
  const char* mode = "full";
  TimingStats time;
  Ceiling ceiling;
  int64_t saved_activation_bytes = 0;
  MemoryUse memory;  // the backend memory's tensors: live before the timed calls, peak during them, and
                     // allocations made by them (nothing should grow from call to call)
  int threads = 0;   // OpenMP threads the run used
  NullRoutingStats null_stats;
  MachineNoise noise;        // while its calls ran
  std::string gemm_kernels;  // its backend's take_kernel_choices() after its calls: the variant per GEMM form
  ParallelMeasure parallel;
  // quant modes: relative error of the output and the worst gradient against quant_mode none on the
  // same inputs (bench/harness/quant_error.h); nullopt where not measured.
  std::optional<double> quant_rel_err, quant_grad_rel_err;
  WaitChoice wait;  // how its OpenMP threads waited (bench/probes/wait_policy.h): the process's policy
  std::string device_model;     // Backend::device_model(): the CPU or GPU that computed
  int64_t experts_touched = 0;  // routed experts with a row (their weights are read: compulsory_bytes)
  // Rows (real assignments) per routed expert, for the per-expert roofline (accounting.h roofline_seconds);
  // empty in a run over several ranks, whose shares of the experts and the machine it does not model.
  std::vector<int64_t> expert_rows;
};

// The ceiling's bandwidth peaks: a write peak missing reads as the read peak, a zero-write peak missing as
// the write peak; none without a read peak.
std::optional<BandwidthPeaks> bandwidth_peaks(const Ceiling& ceiling);

// The bandwidth peak a run's bytes are read against (the row's bw_peak_gbps): the peaks mixed by its traffic
// (accounting.h Traffic::mixed_gbps); none without a read peak.
std::optional<double> bw_peak_gbps(const Traffic& traffic, const Ceiling& ceiling);

// The memory roofline's verdict on a call of `flops` (accounting.h seed_flops) moving `traffic`
// (compulsory_traffic): whether its arithmetic intensity (FLOPs / bytes) is below the ridge point (arithmetic
// peak / bw_peak_gbps), i.e. bandwidth binds it. None without both peaks: the machine's kept ones
// (machine_peaks.h), or this process's with --with-peak; none where the ceiling is off or the backend is not
// cpu.
std::optional<bool> memory_bound(const Traffic& traffic, double flops, const Ceiling& ceiling);

// One row of a run: the seed's RESULT keys in its order, then ours (dtype, the five time statistics,
// ceiling_tflops, pct_of_ceiling, ceiling_note (ceiling.h), saved_activation_bytes, tensor_bytes_live,
// tensor_bytes_peak, timed_allocations (Measured::memory), threads, noise_note,
// load_avg_1m, involuntary_switches, steal_pct (noise.h), wait_policy, wait_policy_reason (wait_policy.h),
// world_size, mesh_data, mesh_expert, rank_layout,
// tflops_per_rank, comm_s, comm_bytes, comm_gbps (comm_bytes / comm_s, null without communication),
// modeled_comm_bytes, ep_overlap, comm_peak_a2a_gbps, comm_peak_allreduce_gbps (measure_comm_peak),
// comm_peak_gbps (comm_bytes over the seconds they would take at those peaks), pct_of_comm_peak (comm_gbps /
// comm_peak_gbps; null without communication), gemm_kernels, gemm_thresholds), then the
// full config, the kernel config and the environment, then iters, warmup, repeats, run_id, row_schema
// (run_id.h), the command and samples_s (every timed call in seconds, one array per --repeats block).
// TF/s uses the seed's FLOP formula and the mean time. No ceiling: ceiling_tflops and pct_of_ceiling
// are null ("none" in the text line).
ResultRow make_row(const MoeConfig& c, const KernelConfig& k, const Protocol& p, const Measured& m,
                   const Environment& env);

// The seed's RESULT line (its keys and number formats, so a seed parser still works) followed by our
// run keys; the config and environment stay in the jsonl/csv rows.
std::string result_text(const ResultRow& row);
std::string format_jsonl(const ResultRow& row);
std::string csv_header(const ResultRow& row);
std::string format_csv(const ResultRow& row);

// --check's results: "CHECK pass=.. out_rel_err=.. grad_rel_err=.. tol=.. worst=.." (tol and worst:
// the tensor nearest to or furthest over its tolerance), and the same as check_* fields of a row.
std::string check_line(const MoeConfig& c, const ConditionedCheck& r);
void add_check_fields(ResultRow& row, const ConditionedCheck& r);

// One line per row in `format` (text: the RESULT line).
std::vector<std::string> format_rows(OutputFormat format, const std::vector<ResultRow>& rows);
// The first line a results file of `format` must start with: the csv header, none for text and jsonl.
std::string file_header(OutputFormat format, const ResultRow& row);

// Whether a line of a results file of `format` is a whole row (append_lines cuts a last line that is
// not): jsonl, one that parses as a JSON object; csv, one with `header`'s number of fields. Text
// results files are for reading, so none of their lines is judged (none is ever cut).
RowTest row_test(OutputFormat format, const std::string& header);

// Appends `rows` to `path` in `format` (csv: writes the header when the file is new or empty, and
// refuses a file whose header differs).
Status append_rows(const std::string& path, OutputFormat format, const std::vector<ResultRow>& rows);

}  // namespace moe::bench
