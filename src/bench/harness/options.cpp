#include "bench/harness/options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "bench/harness/cli.h"
#include "bench/harness/flag_table.h"
#include "bench/harness/models.h"
#include "moe/backend.h"
#include "moe/build_info.h"
#include "moe/null_routing.h"
#include "moe/parse.h"

namespace moe::bench {
namespace {

// --mesh data=D,expert=X (both, in that order, D and X >= 1).
Status parse_mesh(const std::string& text, int64_t& data, int64_t& expert) {
  long long d = 0, x = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "data=%lld,expert=%lld%n", &d, &x, &used) != 2 || used != int(text.size()) ||
      d < 1 || x < 1 || d > (1 << 20) || x > (1 << 20))
    return Status::error(fmt::format(
        "invalid --mesh '{}': expected data=D,expert=X with D, X >= 1 (e.g. data=2,expert=4)", text));
  data = d;
  expert = x;
  return Status::ok();
}

// Flags that would do nothing in the combination given are refused in one line, not ignored (issue 41
// item 8): --check-perturb without --check (nothing compares the scaled results), --peak with --out or
// --format (it prints its table to stdout and no rows), --peak with --list (each prints and exits).
Status check_flags_take_effect(const CLI::App& app, const BenchOptions& opts) {
  if (app.count("--check-perturb") > 0 && !opts.check)
    return Status::error("--check-perturb scales the results --check compares: it takes --check");
  if (opts.peak && opts.list) return Status::error("--peak and --list each print and exit: give one of them");
  for (const char* flag : {"--out", "--format"})
    if (opts.peak && app.count(flag) > 0)
      return Status::error(
          fmt::format("--peak prints its table to stdout and writes no rows: it takes no {}", flag));
  return Status::ok();
}

}  // namespace

const char* name(QueueMode q) {
  return q == QueueMode::full ? "full" : "prequeue";
}

namespace {

// The flags whose values are lists (or "both"), a mesh or a policy, as given: converted once the command
// line is parsed. Numbers and single names are converted by the flag table.
struct FlagText {
  std::string impl = "both", distribution = "both", queue = "full", topk_list, mesh, null_list;
  std::string wait_policy = "auto", model, hf_config;
  bool null_sweep = false;
};

constexpr int64_t kMaxInt = std::numeric_limits<int>::max(), kMax64 = std::numeric_limits<int64_t>::max();

// The block's shape and how its groups are formed.
void add_shape_flags(CLI::App& app, FlagTable& flags, BenchOptions& opts, FlagText& t) {
  MoeConfig& c = opts.base;
  // Expanded into the flags below before parsing (models.h), where it stands among them.
  app.add_option("--model", t.model,
                 "a published model's MoE layer: sets --hidden, --mlp-dim, --experts, --topk and "
                 "--shared-expert-dim (later flags override; --list shows the numbers): " +
                     model_names());
  app.add_option("--hf-config", t.hf_config,
                 "a Hugging Face config.json: its MoE layer's shape flags, as --model sets them (mixtral, "
                 "qwen2_moe, qwen3_moe, deepseek_v2/v3, olmoe, gpt_oss, llama4)");

  flags.add("--tokens", c.tokens, "T, tokens (rows of x)", 1, kMax64);
  flags.add("--hidden", c.hidden, "H, hidden size", 1, kMax64);
  flags.add("--mlp-dim", c.mlp_dim, "M, per-expert intermediate size", 1, kMax64);
  flags.add("--experts", c.experts, "E, routed experts", 1, kMax64);
  flags.add("--ep-overlap", c.ep_overlap,
            "N chunks of rows whose dispatch overlaps the experts of the previous (ep all_to_all; 1 = "
            "off)",
            1, 1024);
  flags.add("--topk", opts.topk_flag, "K, experts per token (unless --topk-list)", -kMax64, kMax64);
  app.add_option("--topk-list", t.topk_list, "comma list of K values, overrides --topk (e.g. 1,2,4,8)");
  flags.add("--shared-expert-dim", c.shared_expert_dim, "S, shared expert size (0 = none)", 0, kMax64);
  app.add_flag("--shared-fused", c.shared_fused, "shared w1|w3 as one [H,2S] GEMM");
  flags.add_name("--dtype", c.dtype, kRunDtypes, "16-bit storage, f32 accumulation");
  flags.add_name("--backend", c.gemm_backend, kGemmBackends,
                 "gmm: contiguous, tile-padded groups; ragged_dot: exact groups");
  app.add_option("--impl", t.impl,
                 "baseline|fused_w13|preweight|fused_w13_preweight|scatter|fast|both, or ref_dp (the seed's "
                 "DP baseline, spec 5.5)")
      ->capture_default_str();
  app.add_option("--distribution", t.distribution, kDistributions.joined("|") + "|both")
      ->capture_default_str();
  flags.add_name("--bench-pass", c.bench_pass, kBenchPasses, "");
  flags.add_name("--parallel-mode", c.parallel_mode, kParallelModes,
                 "one rank, or tokens (dp) or experts (ep) sharded over the ranks of mpirun");
  app.add_option("--queue-mode", t.queue, "full|prequeue|both (forward_backward forces full)")
      ->capture_default_str();
  flags.add_name("--routing-pack-strategy", c.pack_strategy, kPackStrategies, "");
  flags.add_name("--dispatch-permute-mode", c.permute_mode, kPermuteModes, "");
  app.add_flag("--use-custom-sort-vjp", c.use_custom_sort_vjp,
               "repeat_sort backward as an inverse-permutation gather instead of a scatter-add");
}

// Parallel modes, routing, capacity, quantization, the device and null routing.
void add_routing_and_parallel_flags(CLI::App& app, FlagTable& flags, BenchOptions& opts, FlagText& t) {
  MoeConfig& c = opts.base;
  app.add_option("--mesh", t.mesh,
                 "data=D,expert=X: the ranks as D data replicas of X expert shards (--parallel-mode ep; "
                 "default: dp data=R,expert=1, ep data=1,expert=R)");
  flags.add_name("--ep-comm-path", c.ep_comm_path, kEpCommPaths,
                 "ep: all-reduce of the output; all-gather of x and reduce-scatter of the output; "
                 "all-to-all-v of rows; the seed's first EP: every assignment through the local experts, "
                 "the others' masked, all-reduce of the output");
  app.add_option("--trace-dir", opts.trace_dir,
                 "write a Chrome trace (stage spans of one extra call) per run under this directory");
  flags.add_name("--remat-mode", c.remat_mode, kRematModes, "");
  flags.add("--capacity-factor", c.capacity_factor, "capacity factor (<= 0 disables)");
  flags.add_name("--capacity-policy", c.capacity_policy, kCapacityPolicies, "");
  flags.add("--run-alpha", c.run_alpha, "runs distribution: mean run length 1/(1-alpha)");
  flags.add("--run-noise-scale", c.run_noise_scale, "runs distribution: logit noise std");
  flags.add_name("--quant-mode", c.quant_mode, kQuantModes,
                 "int8 GEMMs with exact int32 sums (int8: the shared expert's; int8_routed: the routed "
                 "experts', weights quantized in every call; int8_all: both; int8_routed_prequant: routed, "
                 "weights quantized once)");
  flags.add_name("--matmul-precision", c.matmul_precision, kMatmulPrecisions,
                 "how a bfloat16 run multiplies the shared expert's float32 activations (default: one bf16 "
                 "pass, as JAX on TPU; highest: float32)");
  app.add_option("--device", c.device, "backend that runs the block: cpu|ref|cuda (see --list)")
      ->capture_default_str();
  flags.add("--null-route-frac", c.null_routing.frac, "fraction of the T*K assignments routed to null slots");
  app.add_option("--null-route-frac-list", t.null_list,
                 "comma list of null fractions (overrides sweep and frac)");
  app.add_flag("--null-route-sweep", t.null_sweep, "null fractions 0.1..0.9");
  flags.add("--null-experts", c.null_routing.null_experts, "null slots M0 (0 = max(1, round(E f/(1-f))))", 0,
            kMax64);
  // The seed folds it into a key as a uint32 (jax.random.fold_in).
  flags.add("--null-route-seed", c.null_routing.seed, "folded into the null-mask key", 0, 0xffffffffll);
  flags.add_name("--null-routing-mode", c.null_routing.mode, kNullRoutingModes, "");
  app.add_flag(
      "--renormalize-topk", c.renormalize_topk,
      "--impl ref_dp: rescale the top-k softmax probabilities to sum to 1 (the profile harness's flag)");
  app.add_flag("--renormalize-real-after-null", c.null_routing.renormalize,
               "renormalize each token's remaining real weights to sum to 1");
}

// The timing protocol, kernels, checks and outputs.
void add_run_flags(CLI::App& app, FlagTable& flags, BenchOptions& opts, FlagText& t) {
  MoeConfig& c = opts.base;
  flags.add("--iters", opts.iters, "timed iterations", 1, kMaxInt);
  flags.add("--warmup", opts.warmup, "untimed iterations after the first call (a negative count: none)",
            -kMaxInt, kMaxInt);
  flags.add("--repeats", opts.repeats,
            "separate timed blocks (warmup + iters each) per run; rows carry the spread of all their calls",
            1, kMaxInt);
  flags.add_name("--ceiling", opts.ceiling, kCeilingModes,
                 "the dense GEMM ceiling: none, measured once per shape, dtype, backend and threads in this "
                 "process, or before every run");
  // Any int64, as the seed's jax.random.PRNGKey(seed) accepts.
  flags.add("--seed", c.seed, "master seed of inputs and routing", std::numeric_limits<int64_t>::min(),
            kMax64);
  flags.add("--threads", opts.kernel.threads, "CPU threads (0 = all cores)", 0, kMaxInt);
  app.add_option(
         "--wait-policy", t.wait_policy,
         "how OpenMP threads wait: auto (spin where our threads have their cores, bounded where a VM's "
         "host takes a slice of them, passive where other threads share them; measured at start), "
         "spin, passive, bounded (spin briefly, then sleep); OMP_WAIT_POLICY or GOMP_SPINCOUNT in the "
         "environment win")
      ->capture_default_str();
  flags.add("--gmm-tile-rows", opts.kernel.gmm_tile_rows, "gmm backend: group row alignment", 1, 4096);
  flags.add("--cuda-gemm-streams", opts.kernel.cuda_gemm_streams,
            "cuda: streams the per-expert GEMMs of a grouped GEMM run on concurrently", 1, 32);
  app.add_flag("--stage-timing", opts.stage_timing, "forward only: time pack, up, down, combine separately");
  app.add_option(
         "--gemm-variant", opts.kernel.gemm_variant,
         "GEMM kernel variant (see --list; auto = measured per form and shape, kept in the tuning file)")
      ->capture_default_str();
  app.add_flag("--tune", opts.kernel.retune,
               "auto: measure the GEMM variants again and replace the tuning file's entries");
  app.add_option("--tuning-file", opts.kernel.tuning_file,
                 "auto's tuning file (default: MOE_TUNING_FILE, else $XDG_CACHE_HOME or ~/.cache, "
                 "/moe-bench/tuning.json; none: no file, no measuring)");
  app.add_flag("--check", opts.check,
               "verify each run against the float64 reference; exit 1 if out of tolerance");
  flags.add("--check-perturb", opts.check_perturb,
            "tests the oracle: scale the output and gradients by (1 + this) before --check compares them");
  app.add_option("--dump", opts.dump_dir,
                 "write inputs, routing, output and gradients as .npy + config.json here");
  flags.add_name("--format", opts.format, kOutputFormats,
                 "rows on stdout, or in --out with the seed lines on stdout");
  app.add_option(
      "--out", opts.out_path,
      "append result rows to this file (file-locked, whole rows; rows carry config + environment)");
  app.add_flag("--list", opts.list, "print registered backends, impls and kernel variants, then exit");
  app.add_flag(
      "--peak", opts.peak,
      "measure the register-resident arithmetic peak of each ISA this CPU runs (--threads), then exit");
  app.add_flag("--verbose", opts.verbose,
               "say each backend's device, threads and OpenMP wait policy on stderr (said anyway on a "
               "terminal and in a sweep of several runs; the seed's script writes nothing there)");
  app.add_flag("--with-peak", opts.with_peak,
               "rows carry peak_tflops and pct_of_peak: the CPU's peak for the run's arithmetic, measured "
               "once per process");
}

// Output paths, the run's modes and names (error on the first wrong one).
Status convert_modes(const CLI::App& app, const FlagText& t, BenchOptions& opts) {
  MoeConfig& c = opts.base;
  MOE_CHECK(t.model.empty() && t.hf_config.empty(),
            "--model and --hf-config reach parse_options expanded (expand_model_presets)");
  for (auto [flag, value] :
       {std::pair{"--out", &opts.out_path}, {"--dump", &opts.dump_dir}, {"--trace-dir", &opts.trace_dir}})
    if (app.count(flag) > 0 && value->empty())
      return Status::error(fmt::format("invalid {} '': expected a path", flag));
  MOE_RETURN_IF_ERROR(check_flags_take_effect(app, opts));
  MOE_RETURN_IF_ERROR(parse_wait_policy(t.wait_policy, opts.wait_policy));
  if (app.count("--mesh") > 0) MOE_RETURN_IF_ERROR(parse_mesh(t.mesh, c.mesh_data, c.mesh_expert));
  const std::vector<std::string>& devices = registered_backend_names();
  if (std::find(devices.begin(), devices.end(), c.device) == devices.end())
    return Status::error(fmt::format("invalid --device '{}': expected one of {}", c.device, backend_names()));
  if (!std::isfinite(opts.check_perturb))
    return Status::error(fmt::format("invalid --check-perturb={}: must be finite", opts.check_perturb));

  return Status::ok();
}

// Null routing's fractions (a list, a sweep or one fraction).
Status convert_null_fractions(const FlagText& t, BenchOptions& opts) {
  MoeConfig& c = opts.base;
  Status null_status;
  opts.null_fracs = null_route_fractions(t.null_list, t.null_sweep, c.null_routing.frac, null_status);
  MOE_RETURN_IF_ERROR(null_status);
  for (double f : opts.null_fracs)
    if (f > 0 && c.capacity_policy != CapacityPolicy::none)
      return Status::error("Null routing currently requires capacity_policy='none' in this harness.");

  return Status::ok();
}

// The seed's list flags: impls, distributions, queue modes, K values.
Status convert_lists(const CLI::App& app, const FlagText& t, BenchOptions& opts) {
  const MoeConfig& c = opts.base;
  opts.impls.clear();
  if (t.impl == "both") {
    opts.impls = kAllImpls;
  } else {
    Impl one = Impl::fused_w13;
    MOE_RETURN_IF_ERROR(parse_enum("--impl", t.impl, parse_impl, kImpls.joined(", ") + ", both", one));
    opts.impls = {one};
  }
  opts.distributions.clear();
  if (t.distribution == "both") {
    opts.distributions = {Distribution::random, Distribution::runs};
  } else {
    Distribution one = Distribution::random;
    MOE_RETURN_IF_ERROR(parse_enum("--distribution", t.distribution, parse_distribution,
                                   kDistributions.joined(", ") + ", both", one));
    opts.distributions = {one};
  }
  if (t.queue == "full")
    opts.queue_modes = {QueueMode::full};
  else if (t.queue == "prequeue")
    opts.queue_modes = {QueueMode::prequeue};
  else if (t.queue == "both")
    opts.queue_modes = {QueueMode::full, QueueMode::prequeue};
  else
    return Status::error(
        fmt::format("invalid --queue-mode '{}': expected one of full, prequeue, both", t.queue));
  // The seed's rule: prequeue is a forward-only notion.
  if (c.bench_pass != BenchPass::forward) opts.queue_modes = {QueueMode::full};

  opts.queue_mode_flag = t.queue;
  opts.quant_mode_given = app.count("--quant-mode") > 0;

  MOE_RETURN_IF_ERROR(parse_int_list("--topk-list", t.topk_list, -kMax64, kMax64, opts.topks));
  if (opts.topks.empty()) opts.topks = {opts.topk_flag};

  MOE_RETURN_IF_ERROR(check_kernel_config(opts.kernel));

  return Status::ok();
}

}  // namespace

Status parse_options(int argc, char** argv, BenchOptions& opts, bool& exit_ok, std::vector<FlagSpec>* specs) {
  exit_ok = false;
  MoeConfig& c = opts.base;
  CLI::App app{"moe-bench: benchmark one Mixture-of-Experts block (forward / forward+backward) on the CPU"};
  // argparse semantics: a repeated option takes its last value (sweep scripts append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  FlagTable flags(app);
  app.set_version_flag("--version",
                       std::string("moe-bench ") + build_version() + " (" + build_git_commit() + ")");
  app.get_formatter()->column_width(36);
  app.footer(
      "Every flag that describes a run takes a comma list, a sweep axis run as a cartesian product (integers "
      "also "
      "first-last, first-last+step, first-last*factor); the seed's list flags keep their meaning.\n"
      "Research commands (each with --help): moe-bench sweep [--plan FILE] --out STORE [FLAGS] (resumable), "
      "compare BASE NEW, plot STORE, table STORE, log --id ID.");

  FlagText t;
  add_shape_flags(app, flags, opts, t);
  add_routing_and_parallel_flags(app, flags, opts, t);
  add_run_flags(app, flags, opts, t);
  if (specs) {
    for (const CLI::Option* opt : app.get_options())
      for (const std::string& n : opt->get_lnames())
        specs->push_back({"--" + n, opt->get_type_size() > 0, opt->get_type_name() == "INT"});
    return Status::ok();
  }

  MOE_RETURN_IF_ERROR(parse_cli(app, argc, argv, exit_ok));
  if (exit_ok) return Status::ok();
  MOE_RETURN_IF_ERROR(flags.convert());
  opts.warmup = std::max(opts.warmup, 0);  // the seed's range(warmup): a negative count warms up nothing

  MOE_RETURN_IF_ERROR(convert_modes(app, t, opts));
  MOE_RETURN_IF_ERROR(convert_null_fractions(t, opts));
  MOE_RETURN_IF_ERROR(convert_lists(app, t, opts));

  // The impl's own rules (ref_dp's) are checked per run (check_runnable); here the first impl's, so a
  // flag only one impl takes (--renormalize-topk) is seen with it.
  c.impl = opts.impls.front();
  // Every run's config (one per topk) must be valid.
  for (int64_t k : opts.topks) {
    c.topk = k;
    MOE_RETURN_IF_ERROR(c.validate());
  }
  c.topk = opts.topks.front();
  MOE_RETURN_IF_ERROR(opts.kernel.validate());
  return Status::ok();
}

}  // namespace moe::bench
