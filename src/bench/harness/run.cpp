#include "bench/harness/run.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string_view>
#include <tuple>

#include "bench/harness/accounting.h"
#include "bench/harness/finite.h"
#include "bench/harness/quant_error.h"
#include "bench/harness/rank_stages.h"
#include "bench/harness/seed_lines.h"
#include "bench/harness/threads.h"
#include "bench/harness/timing.h"
#include "bench/probes/bandwidth.h"
#include "bench/probes/machine_peaks.h"
#include "bench/probes/noise.h"
#include "bench/probes/trace.h"
#include "moe/block.h"
#include "moe/conditioned_check.h"
#include "moe/dump.h"
#include "moe/exchange.h"
#include "moe/file_io.h"
#include "moe/parallel.h"

namespace moe::bench {
namespace {

// Spec §9.4: each stage timed on its own (same warmup/iters); inputs of a stage come from one extra
// call of the previous stage. The shared expert is in no stage, so the combine writes an output of its
// own: the timed call's output (which --check and --dump read, shared with its host copy on a host
// backend) must not become the staged sum without the shared expert.
void print_stage_timing(const BenchOptions& o, const MoeConfig& c, const MoeInputs& in,
                        const RoutingTensors& routing, MoeBlock& block, Backend& backend) {
  if (c.bench_pass != BenchPass::forward) {
    fmt::print(stderr, "moe-bench: --stage-timing is forward only; skipped for forward_backward\n");
    return;
  }
  Tensor out = backend.empty(c.dtype, {c.tokens, c.hidden});
  auto sync = [&] { backend.synchronize(); };
  double pack = time_fn([&] { block.stage_pack_dispatch(in, routing); }, o.warmup, o.iters, sync).mean;
  double up = time_fn([&] { block.stage_up(in); }, o.warmup, o.iters, sync).mean;
  double down = time_fn([&] { block.stage_down(in); }, o.warmup, o.iters, sync).mean;
  double combine = time_fn([&] { block.stage_combine(out, routing); }, o.warmup, o.iters, sync).mean;
  fmt::print("{}", stage_lines(c, pack, up, down, combine));
  if (c.quant_mode == QuantMode::none) return;
  // Beyond the seed: what quantizing costs inside up and down (int8_routed and int8_all quantize the
  // weights in every call), from the ops' own sub-stages over as many more up + down calls.
  double weights_s = 0, rows_s = 0;
  block.set_stage_observer(
      [&](const char* stage, StageTracer::Clock::time_point start, StageTracer::Clock::time_point end) {
        const double s = std::chrono::duration<double>(end - start).count();
        if (std::string_view(stage) == "quantize_weights") weights_s += s;
        if (std::string_view(stage) == "quantize_rows") rows_s += s;
      });
  for (int i = 0; i < o.iters; ++i) {
    block.stage_up(in);
    block.stage_down(in);
  }
  block.set_stage_observer(nullptr);
  fmt::print("{}", quant_stage_line(c, weights_s / o.iters, rows_s / o.iters, up + down));
}

// --check-perturb: the host copies --check compares, scaled by (1 + rel) (fresh copies: on a host
// backend the host copy is the block's own buffer).
Tensor perturbed(const Tensor& t, double rel) {
  Tensor p = t.clone();
  for (int64_t i = 0; i < p.numel(); ++i) p.set(i, p.get(i) * (1.0 + rel));
  return p;
}

// Over several ranks each call's time is the slowest rank's (the calls start together, behind a barrier).
TimingStats max_over_ranks(Comm& comm, const TimingStats& t, Status& status) {
  if (comm.size() == 1) return t;
  const int64_t n = int64_t(t.samples.size());
  Tensor mine(Dtype::f64, {n}), all(Dtype::f64, {n * comm.size()});
  for (int64_t i = 0; i < n; ++i) mine.set(i, t.samples[size_t(i)]);
  if (Status s = comm.all_gather(all, mine); !s) {
    status = s;
    return t;
  }
  std::vector<double> slowest(t.samples);
  for (int r = 0; r < comm.size(); ++r)
    for (int64_t i = 0; i < n; ++i) slowest[size_t(i)] = std::max(slowest[size_t(i)], all.get(r * n + i));
  return summarize(std::move(slowest), t.blocks);
}

// The rows' parallel keys from each rank's meter of the timed calls: the slowest rank's time in
// collectives and the most any rank sent, per call, against the bandwidth the step's collectives reach
// alone (measured once per run: `peak`, on the comms of the meter's largest messages).
ParallelMeasure measure_parallel(Comm& comm, const MoeConfig& c, const CommMeter& m, int64_t real,
                                 std::optional<CommPeak>& peak, Status& status) {
  ParallelMeasure pm;
  pm.world_size = comm.size();
  std::tie(pm.mesh_data, pm.mesh_expert) = mesh_of(c, comm.size());
  for (int r = 0; r < comm.size(); ++r)
    pm.rank_layout += fmt::format("{}r{}:{}", r ? ";" : "", r, describe(rank_layout(c, r, comm.size())));
  pm.modeled_comm_bytes = modeled_comm_bytes(c, comm.size(), real);
  if (!peak && comm.size() > 1) {
    peak.emplace();
    if (Status s = measure_comm_peak(m, *peak); !s) status = s;
  }
  const CommPeak p = peak.value_or(CommPeak{});
  double transfer = 0;
  if (Status s = measure_comm_transfer(m, transfer); !s) status = s;
  const double calls = double(std::max<int64_t>(1, m.calls));
  constexpr int kKeys = 7;
  Tensor mine(Dtype::f64, {kKeys}), all(Dtype::f64, {kKeys * comm.size()});
  mine.set(0, m.seconds / calls);
  mine.set(1, double(m.bytes) / calls);
  mine.set(2, p.ideal_seconds(m) / calls);
  mine.set(3, p.a2a_gbps);
  mine.set(4, p.reduce_gbps);
  mine.set(5, transfer / calls);
  mine.set(6, (m.seconds - transfer) / calls);
  if (Status s = comm.all_gather(all, mine); !s) status = s;
  // The slowest group's peak: 0 (none measured) is no bound.
  auto slowest = [](double a, double b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); };
  for (int r = 0; r < comm.size(); ++r) {
    const double* k = all.data<double>() + kKeys * r;
    pm.comm_s = std::max(pm.comm_s, k[0]);
    pm.comm_bytes = std::max(pm.comm_bytes, int64_t(std::llround(k[1])));
    pm.ideal_comm_s = std::max(pm.ideal_comm_s, k[2]);
    pm.peak_a2a_gbps = slowest(pm.peak_a2a_gbps, k[3]);
    pm.peak_reduce_gbps = slowest(pm.peak_reduce_gbps, k[4]);
    pm.comm_transfer_s = std::max(pm.comm_transfer_s, k[5]);
    pm.comm_wait_s = std::max(pm.comm_wait_s, k[6]);
  }
  return pm;
}

// --stage-timing over several ranks (rank_stages.h): `call` repeated as the timed calls are (warmup,
// then iters, each behind a barrier) with every stage observed on every rank; rank 0 gets the lines.
template <typename Call>
Status time_rank_stages(const BenchOptions& o, const MoeConfig& c, Comm& comm, MoeBlock& block, Call&& call,
                        std::string& lines) {
  StageClock clock;
  bool recording = false;
  block.set_stage_observer([&](const char* stage, auto start, auto end) {
    if (recording) clock.add(stage, std::chrono::duration<double>(end - start).count());
  });
  Status status;
  for (int i = 0; i < o.warmup + o.iters && status; ++i) {
    recording = i >= o.warmup;
    status = comm.barrier();
    if (status) call();
  }
  block.set_stage_observer(nullptr);
  std::vector<std::string> per_rank;
  MOE_RETURN_IF_ERROR(status);
  MOE_RETURN_IF_ERROR(gather_text(comm, clock.encode(o.iters), per_rank));
  lines = rank_stage_lines(c, per_rank);
  return Status::ok();
}

// Keeps the first error of a run.
void keep_first_error(Status& kept, const Status& s) {
  if (!s && kept) kept = s;
}

}  // namespace

Protocol protocol_of(const BenchOptions& o) {
  return {o.iters, o.warmup, o.repeats, o.command, world_comm().size(), o.model};
}

namespace {

// Rows (assignments) per routed expert (ids >= E are null slots).
std::vector<int64_t> expert_rows(const Routing& routing) {
  std::vector<int64_t> rows(size_t(routing.experts), 0);
  for (int32_t id : routing.ids)
    if (id >= 0 && id < routing.experts) ++rows[size_t(id)];
  return rows;
}

// Routed experts with at least one assignment.
int64_t experts_touched(const Routing& routing) {
  const std::vector<int64_t> rows = expert_rows(routing);
  return std::count_if(rows.begin(), rows.end(), [](int64_t n) { return n > 0; });
}

// One run's steps over its context and what they hand each other: prepare (the trace directory, the
// float counterpart of a quant run), per queue mode the traced call and the timed calls with their row,
// then the outputs (trace, stage lines, rows) and, on rank 0, --check and --dump.
class Run {
 public:
  explicit Run(const RunContext& x)
      : x_(x),
        o_(x.o),
        c_(x.c),
        text_stdout_(o_.format == OutputFormat::text || !o_.out_path.empty()),
        root_(x.comm.rank() == 0),
        parallel_(x.comm.size() > 1),
        block_(c_, x.backend, x.comm),
        // This rank's tokens, experts and routing rows (all of them on one rank).
        rc_(rank_config(c_, block_.layout())),
        routing_(to_memory(rank_routing(x.host_routing, block_.layout()), x.backend.memory())),
        out_(x.backend.empty(c_.dtype, {rc_.tokens, c_.hidden})),
        stats_lines_(routing_lines(c_, x.host_routing, x.null_stats)),
        machine_peaks_(MachinePeaks::path_beside_tuning_file(x.backend.kernel().tuning_file)) {
    if (c_.bench_pass == BenchPass::forward_backward) grads_ = make_grads(rc_, x.backend.memory());
  }

  RunOutcome run() {
    if (!prepare()) return std::move(outcome_);
    for (size_t m = 0; m < o_.queue_modes.size(); ++m)
      if (!time_queue_mode(m)) return std::move(outcome_);
    if (!print_outputs()) return std::move(outcome_);
    check_and_dump();
    return std::move(outcome_);
  }

 private:
  // The seed announces a run's trace directory before the run. A quant run's float counterpart runs once
  // before its timed calls (nothing of it stays in the backend's memory).
  bool prepare() {
    if (!o_.trace_dir.empty() && root_) {
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      trace_run_ = trace_run_dir(o_, c_, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
      outcome_.output_status = prepare_output_dir("--trace-dir directory", trace_run_);
      if (!outcome_.output_status) return false;
      if (text_stdout_) fmt::print("trace_dir={}\n", trace_run_);
    }
    if (root_ && c_.quant_mode == QuantMode::int8 && !c_.has_shared())
      fmt::print(stderr,
                 "moe-bench: --quant-mode int8 quantizes the shared expert's GEMMs only; without one "
                 "(--shared-expert-dim 0) it runs quant_mode none's GEMMs, as the seed does\n");
    if (c_.quant_mode == QuantMode::none) return true;
    outcome_.output_status =
        float_results(float_counterpart_.emplace(), c_, x_.backend, x_.comm, x_.in, routing_);
    return bool(outcome_.output_status);
  }

  // The call a (pass, queue mode) times; prequeue packs and dispatches once, outside it.
  std::function<void()> call_for(QueueMode mode) {
    if (c_.bench_pass == BenchPass::forward && mode == QueueMode::prequeue)
      outcome_.output_status = block_.prepare_dispatch(x_.in, routing_);
    return [this, mode] {
      Status s;
      if (c_.bench_pass == BenchPass::forward_backward)
        s = block_.forward_backward(out_, *grads_, x_.in, routing_);
      else if (mode == QueueMode::prequeue)
        s = block_.forward_prepared(out_, x_.in, routing_);
      else
        s = block_.forward(out_, x_.in, routing_);
      if (!s && outcome_.output_status) outcome_.output_status = s;
    };
  }

  // One extra, untimed call with every stage recorded (the seed's profiler trace, spec §1), made before
  // the timed calls so that the last call, which --check and --dump read, is a timed one. An untimed call
  // goes first: a run's first call measures auto's GEMM kernels, creates oneDNN's primitives and touches
  // fresh buffers, which no timed call does (docs/design.md, "--trace-dir"). Every rank records its own
  // stages from the end of one barrier; rank 0 gathers them.
  void trace_call(size_t m, const std::function<void()>& call) {
    call();
    const int64_t measured_before_trace = kernel_measurements(x_.backend);
    std::vector<TraceEvent> mine;
    block_.set_stage_observer([&](const char* stage, auto start, auto end) {
      mine.push_back({stage, int(m), start, end, x_.comm.rank()});
    });
    if (parallel_) keep_first_error(outcome_.output_status, x_.comm.barrier());
    const auto origin = std::chrono::steady_clock::now();
    call();
    block_.set_stage_observer(nullptr);
    MOE_CHECK(kernel_measurements(x_.backend) == measured_before_trace,
              "auto measured GEMM kernels in the traced call");
    if (!parallel_) {
      events_.insert(events_.end(), mine.begin(), mine.end());
      return;
    }
    std::vector<std::string> texts;
    keep_first_error(outcome_.output_status, gather_text(x_.comm, encode_trace_events(mine, origin), texts));
    for (size_t r = 0; r < texts.size(); ++r) {
      const std::vector<TraceEvent> got = decode_trace_events(texts[r], int(r), origin);
      events_.insert(events_.end(), got.begin(), got.end());
    }
  }

  // What the timed calls of one queue mode measured.
  struct Timed {
    TimingStats time;
    MemoryUse memory;
    MachineNoise noise;
    std::string gemm_kernels;
    ParallelMeasure parallel;
    // GB/s: the read probes around the calls (window_read_gbps) or the probes before each (probes_each_call).
    std::optional<double> read_peak_gbps, write_peak_gbps, zero_write_peak_gbps;
    const char* bw_peak_source = nullptr;
  };

  // A single-process cpu run with --with-peak compares itself with the memory of its own minute: the best
  // read probe just before its first call and just after its timed calls (the process's first probe may be
  // minutes older, and a shared machine's memory moves by 1.5-2x from minute to minute). None otherwise.
  std::optional<double> window_read_gbps() {
    if (!probes_own_memory()) return std::nullopt;
    return remembered(measure_read_gbps(omp_get_max_threads()));
  }

  // Whether the run compares itself with read probes of its own (--with-peak, one process, cpu).
  bool probes_own_memory() const { return o_.with_peak && x_.ceiling.peak_tflops && !parallel_; }

  // Kept with the machine's peaks (the best seen), so a later row without --with-peak reads at least it.
  double remembered(double gbps) {
    machine_peaks_.remember_read_gbps(omp_get_max_threads(), gbps);
    return gbps;
  }
  void remembered_write(double gbps, bool zeros) {
    if (zeros) return machine_peaks_.remember_zero_write_gbps(omp_get_max_threads(), gbps);
    machine_peaks_.remember_write_gbps(omp_get_max_threads(), gbps);
  }

  // Where the memory roofline binds the run, the window's probes may meet another memory speed than its
  // calls did (a shared VM's moves within seconds: bandwidth.h MemoryProbe), so it probes just before each
  // timed call instead and compares each call with its own moment: the harmonic mean of the probes is the
  // bandwidth at which the calls would have taken sum(bytes / probe), and pct_of_bw_peak that sum over their
  // time. The probe also leaves each call's weights out of the caches, as a layer's step in a model meets
  // them (the other layers' weights pass between).
  bool probes_each_call() const {
    if (!probes_own_memory()) return false;
    return memory_bound(traffic(), seed_flops(c_, x_.null_stats.real_assignments), x_.ceiling)
        .value_or(false);
  }

  // The bytes each call must move (accounting.h).
  Traffic traffic() const { return compulsory_traffic(c_, experts_touched(x_.host_routing)); }

  // Whether writes of values (zeros) are a tenth or more of the run's traffic (a forward_backward's
  // gradients): then the probe before each call writes them as well as reads.
  bool probes_writes(bool zeros) const {
    const Traffic t = traffic();
    return (zeros ? t.zeros : t.written) >= 0.1 * t.bytes();
  }

  // The harmonic mean of the probes before the calls, the best of them kept for the machine.
  std::optional<double> probed(const std::vector<double>& gbps, bool zeros) {
    if (gbps.empty()) return std::nullopt;
    remembered_write(*std::max_element(gbps.begin(), gbps.end()), zeros);
    return harmonic_mean(gbps);
  }

  static double harmonic_mean(const std::vector<double>& values) {
    double inverses = 0;
    for (double v : values) inverses += 1.0 / v;
    return double(values.size()) / inverses;
  }

  // --repeats blocks of --warmup + --iters calls, each timed call after a barrier over several ranks.
  Timed time_calls(size_t m, const std::function<void()>& call) {
    MemorySpace& memory = x_.backend.memory();
    memory.reset_peak();
    const MemoryUse before = memory.use();
    // auto measures GEMM kernels the first time it meets a shape (cpu/gemm/gemm.h), which is the untimed
    // first call: none may happen in a later one.
    (void)take_kernel_choices(x_.backend);  // the ceiling's and earlier runs'
    int calls = 0;
    int64_t measured_by_first_call = 0;
    // Only the timed calls are metered: the untimed and warmup calls start without a barrier, so their
    // collectives would count a rank's wait for the others still in the previous call.
    CommMeter timed_meter;
    bool timed = false;  // set by the barrier before each timed call
    auto counted_call = [&] {
      const CommMeter mark = block_.comm_meter().mark();
      call();
      if (timed) timed_meter.add_since(mark, block_.comm_meter());
      timed = false;
      if (++calls == 1) measured_by_first_call = kernel_measurements(x_.backend);
    };
    std::optional<MemoryProbe> probe;
    if (probes_each_call()) probe.emplace(omp_get_max_threads(), bytes_beside_calls());
    const bool probe_values = probe && probes_writes(false), probe_zeros = probe && probes_writes(true);
    std::vector<double> call_probes, value_probes, zero_probes;  // GB/s, a probe before each timed call
    const std::optional<double> read_before = probe ? std::nullopt : window_read_gbps();
    const NoiseProbe noise_probe;
    const auto calls_start = std::chrono::steady_clock::now();
    const TimingStats rank_t = time_fn_aligned(
        counted_call, o_.warmup, o_.iters, [&] { x_.backend.synchronize(); }, o_.repeats,
        [&] {
          timed = true;
          if (probe) call_probes.push_back(probe->read_gbps(kPassesBesideCalls));
          if (probe_values) value_probes.push_back(probe->write_gbps(kPassesBesideCalls, false));
          if (probe_zeros) zero_probes.push_back(probe->write_gbps(kPassesBesideCalls, true));
          if (parallel_) keep_first_error(outcome_.output_status, x_.comm.barrier());
        });
    const MemoryUse during = memory.use();  // before the ranks' times and bytes are gathered
    Timed t;
    t.noise = noise_probe.finish(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - calls_start).count(),
        omp_get_max_threads(), available_cores());
    if (probe) {
      t.read_peak_gbps = harmonic_mean(call_probes);
      t.bw_peak_source = "each_call";
      remembered(*std::max_element(call_probes.begin(), call_probes.end()));
      t.write_peak_gbps = probed(value_probes, false);
      t.zero_write_peak_gbps = probed(zero_probes, true);
    } else if (read_before) {
      t.read_peak_gbps = std::max(*read_before, *window_read_gbps());
      t.bw_peak_source = "around_calls";
    }
    MOE_CHECK(kernel_measurements(x_.backend) == measured_by_first_call,
              "auto measured GEMM kernels after a run's first call (a shape class changed between calls)");
    t.gemm_kernels = take_kernel_choices(x_.backend);
    t.memory = MemoryUse{before.live_bytes, during.peak_bytes, during.allocations - before.allocations};
    t.time = max_over_ranks(x_.comm, rank_t, outcome_.output_status);
    t.parallel = measure_parallel(x_.comm, c_, timed_meter, x_.null_stats.real_assignments, comm_peak_,
                                  outcome_.output_status);
    // After the meter was read: these calls are not the timed ones.
    if (o_.stage_timing && text_stdout_ && parallel_ && m == 0)
      keep_first_error(outcome_.output_status, time_rank_stages(o_, c_, x_.comm, block_, call, rank_stages_));
    return t;
  }

  // The last timed call's results on the host; a quant run's error against its float counterpart
  // (gathered: collective, so before the finiteness scan, which one rank alone may fail).
  bool read_results(QueueMode mode, QuantError& qe) {
    host_out_ = out_.to_host();
    if (grads_) host_grads_ = to_host(*grads_);
    if (float_counterpart_) {
      outcome_.output_status = global_results(x_.comm, c_, host_out_, host_grads_ ? &*host_grads_ : nullptr,
                                              global_out_, global_grads_);
      if (!outcome_.output_status) return false;
      have_global_ = true;
      if (root_)
        qe = quant_error(*float_counterpart_, global_out_, global_grads_ ? &*global_grads_ : nullptr);
    }
    if (Status s = check_finite(host_out_, host_grads_ ? &*host_grads_ : nullptr); !s) {
      outcome_.numerics =
          Status::error(fmt::format("run distribution={} topk={} impl={} mode={}: {}", name(c_.distribution),
                                    c_.topk, name(c_.impl), name(mode), s.message()));
      return false;
    }
    return true;
  }

  bool time_queue_mode(size_t m) {
    const QueueMode mode = o_.queue_modes[m];
    const std::function<void()> call = call_for(mode);
    if (!o_.trace_dir.empty()) trace_call(m, call);
    const Timed t = time_calls(m, call);
    if (!outcome_.output_status) return false;
    QuantError qe;
    if (!read_results(mode, qe)) return false;
    Ceiling ceiling = x_.ceiling;
    if (t.read_peak_gbps) {
      ceiling.read_peak_gbps = t.read_peak_gbps;
      ceiling.bw_peak_source = t.bw_peak_source;
    }
    if (t.write_peak_gbps) ceiling.write_peak_gbps = t.write_peak_gbps;
    if (t.zero_write_peak_gbps) ceiling.zero_write_peak_gbps = t.zero_write_peak_gbps;
    ResultRow row = make_row(
        c_, o_.kernel, protocol_of(o_),
        {name(mode), t.time, ceiling, block_.saved_activation_bytes(), t.memory, omp_get_max_threads(),
         x_.null_stats, t.noise, t.gemm_kernels, t.parallel, qe.out_rel_err, qe.grad_rel_err,
         process_wait_policy(), x_.backend.device_model(), experts_touched(x_.host_routing),
         parallel_ ? std::vector<int64_t>{} : expert_rows(x_.host_routing)},
        x_.env);
    if (text_stdout_)
      fmt::print("{}{}{}\n",
                 mode_lines(c_, name(mode), t.time.mean, row["tflops"].get<double>(),
                            row["tokens_per_s"].get<double>(), o_.quant_mode_given),
                 stats_lines_, result_text(row));
    outcome_.rows.push_back(std::move(row));
    return true;
  }

  // The trace file, the stage lines and, in jsonl/csv mode, the rows on stdout.
  bool print_outputs() {
    if (!trace_run_.empty()) {
      outcome_.output_status = write_chrome_trace(trace_run_, events_);
      if (!outcome_.output_status) return false;
    }
    if (o_.stage_timing && text_stdout_) {
      // The seed's EP line first (a seed parser looks for it; the seed times stages of forward only),
      // then every rank's stages.
      if (c_.parallel_mode == ParallelMode::ep && c_.bench_pass == BenchPass::forward)
        fmt::print("[{}] pass=forward stage_timing skipped for parallel_mode=ep\n", name(c_.distribution));
      if (parallel_)
        fmt::print("{}", rank_stages_);
      else
        print_stage_timing(o_, c_, x_.in, routing_, block_, x_.backend);
    }
    if (text_stdout_) return true;
    if (o_.format == OutputFormat::csv && !*x_.csv_header_printed && !outcome_.rows.empty()) {
      fmt::print("{}\n", csv_header(outcome_.rows.front()));
      *x_.csv_header_printed = true;
    }
    for (const std::string& line : format_rows(o_.format, outcome_.rows)) fmt::print("{}\n", line);
    return true;
  }

  // --check and --dump read the global results and inputs: over several ranks the slices are gathered
  // on rank 0, which draws the global inputs.
  void check_and_dump() {
    std::optional<MoeInputs> global_in_store;
    if (o_.check || !o_.dump_dir.empty()) {
      if (!have_global_) {
        outcome_.output_status = global_results(x_.comm, c_, host_out_, host_grads_ ? &*host_grads_ : nullptr,
                                                global_out_, global_grads_);
        if (!outcome_.output_status) return;
      }
      if (parallel_ && root_) global_in_store = make_inputs(c_);
    }
    if (!root_) return;
    const MoeInputs& global_in = global_in_store ? *global_in_store : x_.host_in;
    if (o_.check) check(global_in);
    if (!o_.dump_dir.empty()) {
      // The output and gradients of the last timed call: deterministic, so they belong to these inputs.
      const std::string extra =
          fmt::format("{{\"kernel\": {}, \"environment\": {}}}", o_.kernel.to_json(), x_.env.to_json());
      outcome_.output_status = write_dump(o_.dump_dir, c_, extra, global_in, x_.host_routing, global_out_,
                                          global_grads_ ? &*global_grads_ : nullptr);
    }
    std::fflush(stdout);
  }

  void check(const MoeInputs& global_in) {
    Tensor check_out = global_out_;
    std::optional<MoeGrads> check_grads = global_grads_;
    if (o_.check_perturb != 0) {
      check_out = perturbed(global_out_, o_.check_perturb);
      if (check_grads)
        for (Tensor* g : {&check_grads->dx, &check_grads->dw1, &check_grads->dw3, &check_grads->dw2,
                          &check_grads->dsw1, &check_grads->dsw3, &check_grads->dsw2})
          *g = perturbed(*g, o_.check_perturb);
    }
    const ConditionedCheck r =
        check_conditioned(c_, global_in, x_.host_routing, check_out, check_grads ? &*check_grads : nullptr);
    // In jsonl/csv mode stdout holds rows only, so the CHECK line goes to stderr.
    fmt::print(text_stdout_ ? stdout : stderr, "{}\n", check_line(c_, r));
    outcome_.check_failed = !r.pass;
    for (ResultRow& row : outcome_.rows) add_check_fields(row, r);
  }

  const RunContext& x_;
  const BenchOptions& o_;
  const MoeConfig& c_;
  const bool text_stdout_;
  // Over several ranks rank 0 alone prints, writes and checks (the others' stdout is closed, main.cpp).
  const bool root_, parallel_;
  MoeBlock block_;
  const MoeConfig rc_;
  const RoutingTensors routing_;
  Tensor out_;
  std::optional<MoeGrads> grads_;
  const std::string stats_lines_;
  MachinePeaks machine_peaks_;  // the peaks kept beside the tuning file, which the run's probes raise
  RunOutcome outcome_;
  std::string trace_run_;
  std::vector<TraceEvent> events_;
  std::optional<FloatResults> float_counterpart_;
  // --check, --dump and the finiteness scan read host copies of the last timed call's results, made
  // explicitly (no copy on a host backend).
  Tensor host_out_;
  std::optional<MoeGrads> host_grads_;
  // The last queue mode's global results on rank 0, where quant_rel_err gathered them: --check and
  // --dump read those instead of gathering again.
  Tensor global_out_;
  std::optional<MoeGrads> global_grads_;
  bool have_global_ = false;
  std::optional<CommPeak> comm_peak_;  // measured after the first queue mode's timed calls
  std::string rank_stages_;            // --stage-timing over several ranks: rank 0's lines
};

}  // namespace

RunOutcome run_one(const RunContext& context) {
  return Run(context).run();
}

Status check_runnable(const BenchOptions& o, Backend& backend, const Comm& comm) {
  MoeConfig c = o.base;
  for (int64_t k : o.topks)
    for (Impl impl : o.impls)
      for (double f : o.null_fracs) {
        c.topk = k;
        c.impl = impl;
        c.null_routing.frac = f;
        // The impl's own rules too (ref_dp refuses what the seed's baseline never ran): options
        // validated the flags with the default impl.
        MOE_RETURN_IF_ERROR(c.validate());
        MOE_RETURN_IF_ERROR(backend.supports_block(c));
        MOE_RETURN_IF_ERROR(exchange_supports(c, comm));
      }
  return Status::ok();
}

}  // namespace moe::bench
