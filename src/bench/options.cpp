#include "bench/options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>

#include "moe/build_info.h"
#include "moe/gemm.h"
#include "moe/null_routing.h"

namespace moe::bench {

const char* name(QueueMode q) {
  return q == QueueMode::full ? "full" : "prequeue";
}

namespace {

template <typename Enum, typename Parser>
Status parse_choice(const std::string& flag, const std::string& value, Parser parse, Enum& out,
                    const char* choices) {
  auto v = parse(value);
  if (!v) return Status::error(fmt::format("invalid {} '{}': expected one of {}", flag, value, choices));
  out = *v;
  return Status::ok();
}

// "1, 2,4" -> {1, 2, 4}; blanks ignored, as in the seed.
Status parse_int_list(const std::string& flag, const std::string& text, std::vector<int64_t>& out) {
  out.clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto b = item.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size())
      return Status::error(fmt::format("invalid {} entry '{}': not an integer", flag, item));
    out.push_back(v);
  }
  return Status::ok();
}

}  // namespace

Status parse_options(int argc, char** argv, BenchOptions& opts, bool& exit_ok) {
  exit_ok = false;
  MoeConfig& c = opts.base;
  CLI::App app{"moe-bench: benchmark one Mixture-of-Experts block (forward / forward+backward) on the CPU"};
  app.set_version_flag("--version",
                       std::string("moe-bench ") + build_version() + " (" + build_git_commit() + ")");
  app.get_formatter()->column_width(36);

  std::string dtype = "bfloat16", backend = "gmm", impl = "both", distribution = "both",
              bench_pass = "forward";
  std::string pack = "argsort", permute = "direct_take", remat = "none", cap_policy = "none", queue = "full";
  std::string parallel_mode = "none", quant_mode = "none", topk_list;
  int64_t topk = c.topk;

  app.add_option("--tokens", c.tokens, "T, tokens (rows of x)")->capture_default_str();
  app.add_option("--hidden", c.hidden, "H, hidden size")->capture_default_str();
  app.add_option("--mlp-dim", c.mlp_dim, "M, per-expert intermediate size")->capture_default_str();
  app.add_option("--experts", c.experts, "E, routed experts")->capture_default_str();
  app.add_option("--topk", topk, "K, experts per token (unless --topk-list)")->capture_default_str();
  app.add_option("--topk-list", topk_list, "comma list of K values, overrides --topk (e.g. 1,2,4,8)");
  app.add_option("--shared-expert-dim", c.shared_expert_dim, "S, shared expert size (0 = none)")
      ->capture_default_str();
  app.add_flag("--shared-fused", c.shared_fused, "shared w1|w3 as one [H,2S] GEMM");
  app.add_option("--dtype", dtype, "float32|bfloat16 (bf16 storage, f32 accumulation)")
      ->capture_default_str();
  app.add_option("--backend", backend, "gmm (contiguous, tile-padded groups) | ragged_dot (exact groups)")
      ->capture_default_str();
  app.add_option("--impl", impl, "baseline|fused_w13|preweight|fused_w13_preweight|scatter|fast|both")
      ->capture_default_str();
  app.add_option("--distribution", distribution, "random|runs|both")->capture_default_str();
  app.add_option("--bench-pass", bench_pass, "forward|forward_backward")->capture_default_str();
  app.add_option("--parallel-mode", parallel_mode, "none (ep: not implemented yet)")->capture_default_str();
  app.add_option("--queue-mode", queue, "full|prequeue|both (forward_backward forces full)")
      ->capture_default_str();
  app.add_option("--routing-pack-strategy", pack, "argsort|tuple_sort|expert_score_sort")
      ->capture_default_str();
  app.add_option("--dispatch-permute-mode", permute, "direct_take|repeat_sort")->capture_default_str();
  app.add_flag("--use-custom-sort-vjp", c.use_custom_sort_vjp,
               "repeat_sort backward as an inverse-permutation gather instead of a scatter-add");
  std::string ep_comm_path = "compact_psum";
  app.add_option("--ep-comm-path", ep_comm_path, "compact_psum (ring_ag_rs: needs --parallel-mode ep)")
      ->capture_default_str();
  app.add_option("--trace-dir", opts.trace_dir,
                 "write a Chrome trace (stage spans of one extra call) per run under this directory");
  app.add_option("--remat-mode", remat, "none|expert_mlp|combine")->capture_default_str();
  app.add_option("--capacity-factor", c.capacity_factor, "capacity factor (<= 0 disables)")
      ->capture_default_str();
  app.add_option("--capacity-policy", cap_policy, "none|drop|pad")->capture_default_str();
  app.add_option("--run-alpha", c.run_alpha, "runs distribution: mean run length 1/(1-alpha)")
      ->capture_default_str();
  app.add_option("--run-noise-scale", c.run_noise_scale, "runs distribution: logit noise std")
      ->capture_default_str();
  app.add_option("--quant-mode", quant_mode, "none (int8 modes: not implemented yet)")->capture_default_str();
  std::string null_list, null_mode = "independent";
  bool null_sweep = false;
  app.add_option("--null-route-frac", c.null_routing.frac,
                 "fraction of the T*K assignments routed to null slots")
      ->capture_default_str();
  app.add_option("--null-route-frac-list", null_list,
                 "comma list of null fractions (overrides sweep and frac)");
  app.add_flag("--null-route-sweep", null_sweep, "null fractions 0.1..0.9");
  app.add_option("--null-experts", c.null_routing.null_experts,
                 "null slots M0 (0 = max(1, round(E f/(1-f))))")
      ->capture_default_str();
  app.add_option("--null-route-seed", c.null_routing.seed, "folded into the null-mask key")
      ->capture_default_str();
  app.add_option("--null-routing-mode", null_mode, "independent|take_until_null")->capture_default_str();
  app.add_flag("--renormalize-real-after-null", c.null_routing.renormalize,
               "renormalize each token's remaining real weights to sum to 1");
  app.add_option("--iters", opts.iters, "timed iterations")->capture_default_str();
  app.add_option("--warmup", opts.warmup, "untimed iterations after the first call")->capture_default_str();
  app.add_option("--seed", c.seed, "master seed of inputs and routing")->capture_default_str();
  app.add_option("--threads", opts.kernel.threads, "CPU threads (0 = all cores)")->capture_default_str();
  app.add_option("--gmm-tile-rows", opts.kernel.gmm_tile_rows, "gmm backend: group row alignment")
      ->capture_default_str();
  app.add_flag("--stage-timing", opts.stage_timing, "forward only: time pack, up, down, combine separately");
  app.add_option("--gemm-variant", opts.kernel.gemm_variant,
                 "GEMM kernel variant (see --list; auto = fastest)")
      ->capture_default_str();
  app.add_flag("--check", opts.check,
               "verify each run against the float64 reference; exit 1 if out of tolerance");
  app.add_option("--dump", opts.dump_dir,
                 "write inputs, routing, output and gradients as .npy + config.json here");
  std::string format = "text";
  app.add_option("--format", format,
                 "text|jsonl|csv: rows on stdout, or in --out with the seed lines on stdout")
      ->capture_default_str();
  app.add_option("--out", opts.out_path,
                 "append result rows to this file (atomic; rows carry config + environment)");
  app.add_flag("--list", opts.list, "print registered backends, impls and kernel variants, then exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    exit_ok = true;
    return Status::ok();
  } catch (const CLI::CallForVersion& e) {
    std::puts(e.what());
    exit_ok = true;
    return Status::ok();
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    return Status::error(msg);
  }

  for (auto [flag, value] : {std::pair{"--out", &opts.out_path}, {"--dump", &opts.dump_dir}})
    if (app.count(flag) > 0 && value->empty())
      return Status::error(fmt::format("invalid {} '': expected a path", flag));
  if (format == "text")
    opts.format = OutputFormat::text;
  else if (format == "jsonl")
    opts.format = OutputFormat::jsonl;
  else if (format == "csv")
    opts.format = OutputFormat::csv;
  else
    return Status::error(fmt::format("invalid --format '{}': expected one of text, jsonl, csv", format));
  if (ep_comm_path != "compact_psum")
    return Status::error(fmt::format(
        "--ep-comm-path {} needs --parallel-mode ep, which is not implemented yet", ep_comm_path));
  if (parallel_mode != "none")
    return Status::error(
        fmt::format("--parallel-mode {} is not implemented yet (only 'none')", parallel_mode));
  if (quant_mode != "none")
    return Status::error(fmt::format("--quant-mode {} is not implemented yet (only 'none')", quant_mode));

  MOE_RETURN_IF_ERROR(parse_choice("--dtype", dtype, parse_dtype, c.dtype, "float32, bfloat16"));
  MOE_RETURN_IF_ERROR(parse_choice("--backend", backend, parse_backend, c.backend, "gmm, ragged_dot"));
  MOE_RETURN_IF_ERROR(
      parse_choice("--bench-pass", bench_pass, parse_bench_pass, c.bench_pass, "forward, forward_backward"));
  MOE_RETURN_IF_ERROR(parse_choice("--routing-pack-strategy", pack, parse_pack_strategy, c.pack_strategy,
                                   "argsort, tuple_sort, expert_score_sort"));
  MOE_RETURN_IF_ERROR(parse_choice("--dispatch-permute-mode", permute, parse_permute_mode, c.permute_mode,
                                   "direct_take, repeat_sort"));
  MOE_RETURN_IF_ERROR(
      parse_choice("--remat-mode", remat, parse_remat_mode, c.remat_mode, "none, expert_mlp, combine"));
  MOE_RETURN_IF_ERROR(parse_choice("--capacity-policy", cap_policy, parse_capacity_policy, c.capacity_policy,
                                   "none, drop, pad"));

  MOE_RETURN_IF_ERROR(parse_choice("--null-routing-mode", null_mode, parse_null_routing_mode,
                                   c.null_routing.mode, "independent, take_until_null"));
  Status null_status;
  opts.null_fracs = null_route_fractions(null_list, null_sweep, c.null_routing.frac, null_status);
  MOE_RETURN_IF_ERROR(null_status);
  opts.null_routing_requested = !null_list.empty() || null_sweep || c.null_routing.frac != 0;
  for (double f : opts.null_fracs)
    if (f > 0 && c.capacity_policy != CapacityPolicy::none)
      return Status::error("Null routing currently requires capacity_policy='none' in this harness.");

  opts.impls.clear();
  if (impl == "both") {
    opts.impls = kAllImpls;
  } else {
    Impl one = Impl::fused_w13;
    MOE_RETURN_IF_ERROR(
        parse_choice("--impl", impl, parse_impl, one,
                     "baseline, fused_w13, preweight, fused_w13_preweight, scatter, fast, both"));
    opts.impls = {one};
  }
  opts.distributions.clear();
  if (distribution == "both") {
    opts.distributions = {Distribution::random, Distribution::runs};
  } else {
    Distribution one = Distribution::random;
    MOE_RETURN_IF_ERROR(
        parse_choice("--distribution", distribution, parse_distribution, one, "random, runs, both"));
    opts.distributions = {one};
  }
  if (queue == "full")
    opts.queue_modes = {QueueMode::full};
  else if (queue == "prequeue")
    opts.queue_modes = {QueueMode::prequeue};
  else if (queue == "both")
    opts.queue_modes = {QueueMode::full, QueueMode::prequeue};
  else
    return Status::error(
        fmt::format("invalid --queue-mode '{}': expected one of full, prequeue, both", queue));
  // The seed's rule: prequeue is a forward-only notion.
  if (c.bench_pass != BenchPass::forward) opts.queue_modes = {QueueMode::full};

  MOE_RETURN_IF_ERROR(parse_int_list("--topk-list", topk_list, opts.topks));
  if (opts.topks.empty()) opts.topks = {topk};
  for (int64_t k : opts.topks)
    if (k < 1 || k > c.experts)
      return Status::error(
          fmt::format("Invalid topk={}; must be in [1, experts] (experts={}).", k, c.experts));
  if (opts.iters < 1) return Status::error(fmt::format("invalid --iters={}: must be >= 1", opts.iters));
  if (opts.warmup < 0) return Status::error(fmt::format("invalid --warmup={}: must be >= 0", opts.warmup));

  if (!select_gemm_variant(opts.kernel.gemm_variant)) {
    std::string known = "auto";
    for (const GemmVariant& v : gemm_variants()) known += std::string(", ") + v.name;
    return Status::error(
        fmt::format("invalid --gemm-variant '{}': expected one of {}", opts.kernel.gemm_variant, known));
  }
  opts.kernel.gemm_variant = active_gemm_variant().name;

  c.topk = opts.topks.front();
  MOE_RETURN_IF_ERROR(c.validate());
  MOE_RETURN_IF_ERROR(opts.kernel.validate());
  return Status::ok();
}

}  // namespace moe::bench
