#include "bench/harness/run.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string_view>
#include <tuple>

#include "bench/harness/finite.h"
#include "bench/harness/quant_error.h"
#include "bench/harness/rank_stages.h"
#include "bench/harness/seed_lines.h"
#include "bench/harness/threads.h"
#include "bench/harness/timing.h"
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
  return {o.iters, o.warmup, o.repeats, o.command, world_comm().size()};
}

RunOutcome run_one(const BenchOptions& o, const MoeConfig& c, Backend& backend, Comm& comm,
                   const MoeInputs& in, const MoeInputs& host_in, const Routing& host_routing,
                   const NullRoutingStats& null_stats, const Ceiling& ceiling, const Environment& env) {
  RunOutcome outcome;
  const bool text_stdout = o.format == OutputFormat::text || !o.out_path.empty();
  // Over several ranks rank 0 alone prints, writes and checks (the others' stdout is closed, main.cpp).
  const bool root = comm.rank() == 0, parallel = comm.size() > 1;
  const std::string dist = name(c.distribution);
  MoeBlock block(c, o.kernel, backend, comm);
  // This rank's tokens, experts and routing rows (all of them on one rank).
  const MoeConfig rc = rank_config(c, block.layout());
  const RoutingTensors routing = to_memory(rank_routing(host_routing, block.layout()), backend.memory());
  Tensor out = backend.empty(c.dtype, {rc.tokens, c.hidden});
  std::optional<MoeGrads> grads;
  if (c.bench_pass == BenchPass::forward_backward) grads = make_grads(rc, backend.memory());

  // The seed announces a run's trace directory before the run.
  std::string trace_run;
  std::vector<TraceEvent> events;
  if (!o.trace_dir.empty() && root) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    trace_run = trace_run_dir(o, c, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    outcome.output_status = prepare_output_dir("--trace-dir directory", trace_run);
    if (!outcome.output_status) return outcome;
    if (text_stdout) fmt::print("trace_dir={}\n", trace_run);
  }
  const std::string stats_lines = routing_lines(c, host_routing, null_stats);
  // A quant run's float counterpart, run once before its timed calls (nothing of it stays in the
  // backend's memory).
  std::optional<FloatResults> float_counterpart;
  if (root && c.quant_mode == QuantMode::int8 && !c.has_shared())
    fmt::print(stderr,
               "moe-bench: --quant-mode int8 quantizes the shared expert's GEMMs only; without one "
               "(--shared-expert-dim 0) it runs quant_mode none's GEMMs, as the seed does\n");
  if (c.quant_mode != QuantMode::none) {
    outcome.output_status =
        float_results(float_counterpart.emplace(), c, o.kernel, backend, comm, in, routing);
    if (!outcome.output_status) return outcome;
  }

  // --check, --dump and the finiteness scan read host copies of the last timed call's results, made
  // explicitly (no copy on a host backend).
  Tensor host_out;
  std::optional<MoeGrads> host_grads;
  // The last queue mode's global results on rank 0, where quant_rel_err gathered them: --check and
  // --dump read those instead of gathering again.
  Tensor global_out;
  std::optional<MoeGrads> global_grads;
  bool have_global = false;
  std::optional<CommPeak> comm_peak;  // measured after the first queue mode's timed calls
  std::string rank_stages;            // --stage-timing over several ranks: rank 0's lines
  for (size_t m = 0; m < o.queue_modes.size(); ++m) {
    const QueueMode mode = o.queue_modes[m];
    // The call this (pass, queue mode) times; prequeue packs and dispatches once, outside it.
    if (c.bench_pass == BenchPass::forward && mode == QueueMode::prequeue)
      outcome.output_status = block.prepare_dispatch(in, routing);
    auto call = [&] {
      Status s;
      if (c.bench_pass == BenchPass::forward_backward)
        s = block.forward_backward(out, *grads, in, routing);
      else if (mode == QueueMode::prequeue)
        s = block.forward_prepared(out, in, routing);
      else
        s = block.forward(out, in, routing);
      if (!s && outcome.output_status) outcome.output_status = s;
    };
    if (!o.trace_dir.empty()) {
      // One extra, untimed call with every stage recorded (the seed's profiler trace, spec §1), made
      // before the timed calls so that the last call, which --check and --dump read, is a timed one.
      // An untimed call goes first: a run's first call measures auto's GEMM kernels, creates oneDNN's
      // primitives and touches fresh buffers, which no timed call does (docs/design.md, "--trace-dir").
      // Every rank records its own stages from the end of one barrier; rank 0 gathers them.
      call();
      const int64_t measured_before_trace = backend.kernel_measurements();
      std::vector<TraceEvent> mine;
      block.set_stage_observer([&](const char* stage, auto start, auto end) {
        mine.push_back({stage, int(m), start, end, comm.rank()});
      });
      if (parallel) keep_first_error(outcome.output_status, comm.barrier());
      const auto origin = std::chrono::steady_clock::now();
      call();
      block.set_stage_observer(nullptr);
      MOE_CHECK(backend.kernel_measurements() == measured_before_trace,
                "auto measured GEMM kernels in the traced call");
      if (!parallel) {
        events.insert(events.end(), mine.begin(), mine.end());
      } else {
        std::vector<std::string> texts;
        keep_first_error(outcome.output_status, gather_text(comm, encode_trace_events(mine, origin), texts));
        for (size_t r = 0; r < texts.size(); ++r) {
          const std::vector<TraceEvent> got = decode_trace_events(texts[r], int(r), origin);
          events.insert(events.end(), got.begin(), got.end());
        }
      }
    }
    MemorySpace& memory = backend.memory();
    memory.reset_peak();
    const MemoryUse before = memory.use();
    // auto measures GEMM kernels the first time it meets a shape (moe/gemm.h), which is the untimed first
    // call: none may happen in a later one.
    (void)backend.take_kernel_choices();  // the ceiling's and earlier runs'
    int calls = 0;
    int64_t measured_by_first_call = 0;
    // Only the timed calls are metered: the untimed and warmup calls start without a barrier, so their
    // collectives would count a rank's wait for the others still in the previous call.
    CommMeter timed_meter;
    bool timed = false;  // set by the barrier before each timed call
    auto counted_call = [&] {
      const CommMeter before = block.comm_meter().mark();
      call();
      if (timed) timed_meter.add_since(before, block.comm_meter());
      timed = false;
      if (++calls == 1) measured_by_first_call = backend.kernel_measurements();
    };
    const NoiseProbe noise_probe;
    const auto calls_start = std::chrono::steady_clock::now();
    const TimingStats rank_t = time_fn_aligned(
        counted_call, o.warmup, o.iters, [&] { backend.synchronize(); }, o.repeats,
        [&] {
          timed = true;
          if (!parallel) return;
          keep_first_error(outcome.output_status, comm.barrier());
        });
    const MemoryUse during = memory.use();  // before the ranks' times and bytes are gathered
    const MachineNoise noise = noise_probe.finish(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - calls_start).count(),
        omp_get_max_threads(), available_cores());
    MOE_CHECK(backend.kernel_measurements() == measured_by_first_call,
              "auto measured GEMM kernels after a run's first call (a shape class changed between calls)");
    const std::string gemm_kernels = backend.take_kernel_choices();
    const TimingStats t = max_over_ranks(comm, rank_t, outcome.output_status);
    const ParallelMeasure pm =
        measure_parallel(comm, c, timed_meter, null_stats.real_assignments, comm_peak, outcome.output_status);
    // After the meter was read: these calls are not the timed ones.
    if (o.stage_timing && text_stdout && parallel && m == 0)
      keep_first_error(outcome.output_status, time_rank_stages(o, c, comm, block, call, rank_stages));
    if (!outcome.output_status) return outcome;
    host_out = out.to_host();
    if (grads) host_grads = to_host(*grads);
    // Before the finiteness scan, which one rank alone may fail: the gather is collective.
    QuantError qe;
    if (float_counterpart) {
      outcome.output_status =
          global_results(comm, c, host_out, host_grads ? &*host_grads : nullptr, global_out, global_grads);
      if (!outcome.output_status) return outcome;
      have_global = true;
      if (root) qe = quant_error(*float_counterpart, global_out, global_grads ? &*global_grads : nullptr);
    }
    if (Status s = check_finite(host_out, host_grads ? &*host_grads : nullptr); !s) {
      outcome.numerics = Status::error(fmt::format("run distribution={} topk={} impl={} mode={}: {}", dist,
                                                   c.topk, name(c.impl), name(mode), s.message()));
      return outcome;
    }
    ResultRow row =
        make_row(c, o.kernel, protocol_of(o),
                 {name(mode), t, ceiling, block.saved_activation_bytes(),
                  MemoryUse{before.live_bytes, during.peak_bytes, during.allocations - before.allocations},
                  omp_get_max_threads(), null_stats, noise, gemm_kernels, pm, qe.out_rel_err, qe.grad_rel_err,
                  process_wait_policy(), backend.device_model()},
                 env);
    if (text_stdout)
      fmt::print("{}{}{}\n",
                 mode_lines(c, name(mode), t.mean, row["tflops"].get<double>(),
                            row["tokens_per_s"].get<double>(), o.quant_mode_given),
                 stats_lines, result_text(row));
    outcome.rows.push_back(std::move(row));
  }
  if (!trace_run.empty()) {
    outcome.output_status = write_chrome_trace(trace_run, events);
    if (!outcome.output_status) return outcome;
  }

  if (o.stage_timing && text_stdout) {
    // The seed's EP line first (a seed parser looks for it; the seed times stages of forward only), then
    // every rank's stages.
    if (c.parallel_mode == ParallelMode::ep && c.bench_pass == BenchPass::forward)
      fmt::print("[{}] pass=forward stage_timing skipped for parallel_mode=ep\n", name(c.distribution));
    if (parallel)
      fmt::print("{}", rank_stages);
    else
      print_stage_timing(o, c, in, routing, block, backend);
  }
  if (!text_stdout) {
    static bool csv_header_printed = false;
    if (o.format == OutputFormat::csv && !csv_header_printed && !outcome.rows.empty()) {
      fmt::print("{}\n", csv_header(outcome.rows.front()));
      csv_header_printed = true;
    }
    for (const std::string& line : format_rows(o.format, outcome.rows)) fmt::print("{}\n", line);
  }

  // --check and --dump read the global results and inputs: over several ranks the slices are gathered
  // on rank 0, which draws the global inputs.
  std::optional<MoeInputs> global_in_store;
  if (o.check || !o.dump_dir.empty()) {
    if (!have_global) {
      outcome.output_status =
          global_results(comm, c, host_out, host_grads ? &*host_grads : nullptr, global_out, global_grads);
      if (!outcome.output_status) return outcome;
    }
    if (parallel && root) global_in_store = make_inputs(c);
  }
  if (!root) return outcome;
  const MoeInputs& global_in = global_in_store ? *global_in_store : host_in;

  if (o.check) {
    Tensor check_out = global_out;
    std::optional<MoeGrads> check_grads = global_grads;
    if (o.check_perturb != 0) {
      check_out = perturbed(global_out, o.check_perturb);
      if (check_grads)
        for (Tensor* g : {&check_grads->dx, &check_grads->dw1, &check_grads->dw3, &check_grads->dw2,
                          &check_grads->dsw1, &check_grads->dsw3, &check_grads->dsw2})
          *g = perturbed(*g, o.check_perturb);
    }
    const ConditionedCheck r =
        check_conditioned(c, global_in, host_routing, check_out, check_grads ? &*check_grads : nullptr);
    // In jsonl/csv mode stdout holds rows only, so the CHECK line goes to stderr.
    fmt::print(text_stdout ? stdout : stderr, "{}\n", check_line(c, r));
    outcome.check_failed = !r.pass;
    for (ResultRow& row : outcome.rows) add_check_fields(row, r);
  }
  if (!o.dump_dir.empty()) {
    // The output and gradients of the last timed call: deterministic, so they belong to these inputs.
    std::string extra =
        fmt::format("{{\"kernel\": {}, \"environment\": {}}}", o.kernel.to_json(), env.to_json());
    outcome.output_status = write_dump(o.dump_dir, c, extra, global_in, host_routing, global_out,
                                       global_grads ? &*global_grads : nullptr);
  }
  std::fflush(stdout);
  return outcome;
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
