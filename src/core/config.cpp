#include "moe/config.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "moe/cpu_isa.h"
#include "moe/rng.h"

namespace moe {

const char* name(Distribution v) {
  return kDistributions.name(v);
}
const char* name(Impl v) {
  return kImpls.name(v);
}
const char* name(GemmBackend v) {
  return kGemmBackends.name(v);
}
const char* name(PackStrategy v) {
  return kPackStrategies.name(v);
}
const char* name(PermuteMode v) {
  return kPermuteModes.name(v);
}
const char* name(CapacityPolicy v) {
  return kCapacityPolicies.name(v);
}
const char* name(RematMode v) {
  return kRematModes.name(v);
}
const char* name(BenchPass v) {
  return kBenchPasses.name(v);
}
const char* name(QuantMode v) {
  return kQuantModes.name(v);
}
const char* name(MatmulPrecision v) {
  return kMatmulPrecisions.name(v);
}
const char* name(ParallelMode v) {
  return kParallelModes.name(v);
}
const char* name(EpCommPath v) {
  return kEpCommPaths.name(v);
}
std::optional<Distribution> parse_distribution(std::string_view s) {
  return kDistributions.parse(s);
}
std::optional<Impl> parse_impl(std::string_view s) {
  return kImpls.parse(s);
}
bool routed_int8(QuantMode mode) {
  switch (mode) {
    case QuantMode::none:
    case QuantMode::int8:
      return false;
    case QuantMode::int8_routed:
    case QuantMode::int8_all:
    case QuantMode::int8_routed_prequant:
      return true;
  }
  return false;
}

bool quantizes_dense(QuantMode mode) {
  return mode == QuantMode::int8 || mode == QuantMode::int8_all;
}
bool any_int8_gemm(const MoeConfig& cfg) {
  return routed_int8(cfg.quant_mode) || (quantizes_dense(cfg.quant_mode) && cfg.has_shared());
}

Dtype MoeConfig::matmul_activation_dtype() const {
  switch (matmul_precision) {
    case MatmulPrecision::default_precision:
      // A bf16 (f16) run's f32 activations are read in bf16 (f16), its storage dtype; a float32 run
      // multiplies in float32.
      switch (dtype) {
        case Dtype::bf16:
          return Dtype::bf16;
        case Dtype::f16:
          return Dtype::f16;
        case Dtype::f32:
          return Dtype::f32;
        case Dtype::f64:
        case Dtype::s8:
        case Dtype::s32:
        case Dtype::s64:
          break;
      }
      MOE_CHECK(false, std::string("no matmul precision rule for run dtype ") + dtype_name(dtype));
    case MatmulPrecision::highest:
      return Dtype::f32;
  }
  MOE_CHECK(false, "unknown matmul precision");
}

const std::vector<Impl> kAllImpls = {
    Impl::baseline, Impl::fused_w13, Impl::preweight, Impl::fused_w13_preweight, Impl::scatter, Impl::fast};

ImplTraits impl_traits(Impl impl) {
  switch (impl) {
    case Impl::baseline:
      return {false, false, false};
    case Impl::fused_w13:
      return {true, false, false};
    case Impl::preweight:
      return {false, true, false};
    case Impl::fused_w13_preweight:
      return {true, true, false};
    case Impl::scatter:
      return {false, false, true};
    case Impl::fast:
      return {true, false, true};
    case Impl::ref_dp:  // w1 and w3 apart; routing weights multiplied after w2, then a scatter-add
      return {false, false, true};
  }
  MOE_CHECK(false, "unknown impl");
}

int64_t MoeConfig::capacity() const {
  if (!capacity_active()) return 0;
  return std::max<int64_t>(1, int64_t(std::ceil(capacity_factor * double(assignments()) / double(experts))));
}

bool MoeConfig::uses_scatter_combine() const {
  return impl_traits(impl).scatter_combine || (capacity_active() && capacity_policy == CapacityPolicy::pad) ||
         null_routing_active();
}

double MoeConfig::estimated_bytes() const {
  double T = double(tokens), H = double(hidden), M = double(mlp_dim), E = double(experts), K = double(topk);
  double S = double(shared_expert_dim);
  double rows = T * K + E * 64.0;
  if (capacity_active() && capacity_policy == CapacityPolicy::pad)
    rows = std::max(rows, E * double(capacity()) + E * 64);
  double es = double(dtype_size(dtype));
  double params = (3 * E * H * M + 3 * H * S) * es * 2;  // weights + fused copies
  if (impl == Impl::ref_dp) {
    // Its static blocks of 256 rows and a copy of the three weight matrices per block.
    const double blocks = std::ceil((T * K + E * 256) / 256);
    rows = blocks * 256;
    params += 3 * blocks * H * M * es;
  }
  // int8 copies of the routed weights (one byte an element): quantized in every call and transposed for the
  // backward, or once (int8_routed_prequant), which the int8 GEMMs also keep in their packed layouts.
  if (routed_int8(quant_mode))
    params += 3 * E * H * M * (quant_mode == QuantMode::int8_routed_prequant ? 4 : 2);
  double acts = (T * H * 3) * 4 + rows * (H * 2 + M * 4) * 4;  // x/out/dx + row buffers (f32 bound)
  double shared = T * S * 3 * 4;
  double grads = bench_pass == BenchPass::forward_backward ? params + acts : 0;
  // float16 on the cpu: no kernel multiplies it, so a GEMM widens its float16 operands and output to float32
  // copies for the call (cpu/gemm/f16_widening.h): at most the widest weight (w13 or its gradient) and rows.
  double widening = dtype == Dtype::f16 && device == "cpu" ? (2 * E * H * M + rows * (H + 2 * M)) * 4 : 0;
  // A bf16 forward on the cpu: gemv keeps the routed weights packed in its tile order for the run (their
  // values hold across a forward run's calls) once any expert has at most gemv_max_rows(true) rows (64, 128
  // on AVX2 CPUs), which a skewed routing gives at any token count (the kernel table runs those experts
  // apart: GroupSplit). Where the CPU runs AMX, amx keeps its B tiles too (auto's measurement warms every
  // candidate on kept weights): the reduction rounded up to 32, the columns to 64.
  const bool kept_packs = dtype == Dtype::bf16 && device == "cpu" && bench_pass == BenchPass::forward &&
                          quant_mode == QuantMode::none;
  const double amx_tiles = isa_level() >= IsaLevel::amx
                               ? E * es *
                                     (std::ceil(H / 32) * 32 * std::ceil(2 * M / 64) * 64 +
                                      std::ceil(M / 32) * 32 * std::ceil(H / 64) * 64)
                               : 0;
  double tiles = kept_packs ? 3 * E * H * M * es + amx_tiles : 0;
  return params + acts + shared + grads + widening + tiles;
}

// ref_dp is the seed's profile-harness path as it was: what that harness never ran is refused, not
// approximated.
namespace {

Status validate_ref_dp(const MoeConfig& c) {
  if (c.impl != Impl::ref_dp) {
    if (c.renormalize_topk)
      return Status::error(
          "--renormalize-topk is the seed's profile-harness routing (--impl ref_dp): every other impl's "
          "weights are the softmax over the K selected logits already");
    return Status::ok();
  }
  std::string what;
  if (c.has_shared())
    what = "a shared expert";
  else if (c.null_routing.frac != 0)
    what = "null routing";
  else if (c.capacity_active())
    what = "a capacity policy";
  else if (c.quant_mode != QuantMode::none)
    what = "a quant mode";
  else if (c.parallel_mode == ParallelMode::ep)
    what = "--parallel-mode ep (ref_dp replicates the weights: --parallel-mode dp)";
  else if (c.remat_mode != RematMode::none)
    what = fmt::format("--remat-mode {} (its backward reads what its forward kept: only none)",
                       name(c.remat_mode));
  if (!what.empty())
    return Status::error(fmt::format(
        "--impl ref_dp is the seed's DP baseline (spec §5.5: no shared expert, quant mode none, no remat): "
        "{} is not part of it",
        what));
  return Status::ok();
}

}  // namespace

// Expert ids, null slot ids included, stay far inside int32.
constexpr int64_t kMaxExperts = int64_t(1) << 20;

Status MoeConfig::validate() const {
  auto positive = [](const char* flag, int64_t v) -> Status {
    if (v <= 0) return Status::error(fmt::format("invalid {}={}: must be a positive integer", flag, v));
    return Status::ok();
  };
  MOE_RETURN_IF_ERROR(positive("--tokens", tokens));
  MOE_RETURN_IF_ERROR(positive("--hidden", hidden));
  MOE_RETURN_IF_ERROR(positive("--mlp-dim", mlp_dim));
  MOE_RETURN_IF_ERROR(positive("--experts", experts));
  if (experts > kMaxExperts)
    return Status::error(fmt::format("invalid --experts={}: at most {} experts", experts, kMaxExperts));
  if (topk < 1 || topk > experts)
    return Status::error(
        fmt::format("Invalid topk={}; must be in [1, experts] (experts={}).", topk, experts));
  if (shared_expert_dim < 0)
    return Status::error(fmt::format("invalid --shared-expert-dim={}: must be >= 0", shared_expert_dim));
  if (!std::isfinite(capacity_factor) || capacity_factor > 64)
    return Status::error(
        fmt::format("invalid --capacity-factor={}: must be a finite number <= 64", capacity_factor));
  // Any finite alpha, as the seed: its mean run length max(2, 1 / max(1e-6, 1 - alpha)) takes 1.0 and beyond.
  if (!std::isfinite(run_alpha))
    return Status::error(fmt::format("invalid --run-alpha={}: must be a finite number", run_alpha));
  // The runs distribution's logits are 6 + scale * N(0, 1) in float32: they must stay finite, or
  // the top-k softmax turns them into NaN weights and NaN outputs.
  const double max_noise = (double(std::numeric_limits<float>::max()) - 6.0) / kMaxAbsNormal;
  if (!(run_noise_scale >= 0 && run_noise_scale <= max_noise))
    return Status::error(fmt::format(
        "invalid --run-noise-scale={}: must be in [0, {:.3g}] so the router logits stay finite in float32",
        run_noise_scale, max_noise));
  if (null_routing.frac != 0 || null_routing.null_experts != 0) {
    if (!(null_routing.frac >= 0 && null_routing.frac < 1))
      return Status::error(
          fmt::format("Invalid null-route fraction {}; expected in [0, 1).", null_routing.frac));
    if (null_routing.null_experts < 0)
      return Status::error(
          fmt::format("invalid --null-experts={}: must be >= 0 (0 = derived)", null_routing.null_experts));
  }
  if ((mesh_data == 0) != (mesh_expert == 0) || mesh_data < 0 || mesh_expert < 0)
    return Status::error(
        fmt::format("invalid --mesh data={},expert={}: both must be >= 1", mesh_data, mesh_expert));
  if (ep_overlap < 1)
    return Status::error(fmt::format("invalid --ep-overlap={}: must be >= 1 (1 = no overlap)", ep_overlap));
  if (device.empty()) return Status::error("invalid --device '': expected a backend name (see --list)");
  MOE_RETURN_IF_ERROR(validate_ref_dp(*this));
  if (null_routing_active() && capacity_policy != CapacityPolicy::none)
    return Status::error("Null routing currently requires capacity_policy='none' in this harness.");
  // Index math uses int32 row ids; keep every count well inside that range.
  const int64_t kMaxIndex = int64_t(1) << 31;
  if (tokens > kMaxIndex / topk)
    return Status::error(fmt::format("invalid --tokens={} with --topk={}: tokens*topk must be at most {}",
                                     tokens, topk, kMaxIndex));
  for (auto [flag, v] :
       {std::pair{"--hidden", hidden}, {"--mlp-dim", mlp_dim}, {"--shared-expert-dim", shared_expert_dim}})
    if (v > (int64_t(1) << 24))
      return Status::error(fmt::format("invalid {}={}: at most {}", flag, v, int64_t(1) << 24));
  return Status::ok();
}

std::string MoeConfig::to_json() const {
  nlohmann::ordered_json j;
  j["tokens"] = tokens;
  j["hidden"] = hidden;
  j["mlp_dim"] = mlp_dim;
  j["experts"] = experts;
  j["topk"] = topk;
  j["shared_expert_dim"] = shared_expert_dim;
  j["shared_fused"] = shared_fused;
  j["dtype"] = dtype_name(dtype);
  j["backend"] = name(gemm_backend);
  j["impl"] = name(impl);
  j["distribution"] = name(distribution);
  j["bench_pass"] = name(bench_pass);
  j["routing_pack_strategy"] = name(pack_strategy);
  j["dispatch_permute_mode"] = name(permute_mode);
  j["use_custom_sort_vjp"] = use_custom_sort_vjp;
  j["remat_mode"] = name(remat_mode);
  j["capacity_policy"] = name(capacity_policy);
  j["capacity_factor"] = capacity_factor;
  j["run_alpha"] = run_alpha;
  j["run_noise_scale"] = run_noise_scale;
  j["seed"] = seed;
  j["null_route_frac"] = null_routing.frac;
  j["null_experts"] = null_routing.null_experts;
  j["null_route_seed"] = null_routing.seed;
  j["null_routing_mode"] = name(null_routing.mode);
  j["renormalize_real_after_null"] = null_routing.renormalize;
  j["device"] = device;
  j["quant_mode"] = name(quant_mode);
  j["matmul_precision"] = name(matmul_precision);
  j["parallel_mode"] = name(parallel_mode);
  j["ep_comm_path"] = name(ep_comm_path);
  if (mesh_data != 0 || mesh_expert != 0) {
    j["mesh_data"] = mesh_data;
    j["mesh_expert"] = mesh_expert;
  }
  if (ep_overlap != 1) j["ep_overlap"] = ep_overlap;
  if (impl == Impl::ref_dp) j["renormalize_topk"] = renormalize_topk;
  return j.dump();
}

Status KernelConfig::validate() const {
  if (threads < 0)
    return Status::error(fmt::format("invalid --threads={}: must be >= 0 (0 = all cores)", threads));
  if (gmm_tile_rows < 1 || gmm_tile_rows > 4096)
    return Status::error(fmt::format("invalid --gmm-tile-rows={}: must be in [1, 4096]", gmm_tile_rows));
  if (cuda_gemm_streams < 1 || cuda_gemm_streams > 32)
    return Status::error(
        fmt::format("invalid --cuda-gemm-streams={}: must be in [1, 32]", cuda_gemm_streams));
  return thresholds.validate();
}

Status GemmThresholds::validate() const {
  for (auto [name, value] : {std::pair{"dpbf16_max_group_rows", dpbf16_max_group_rows},
                             {"dpbf16_min_f32_swiglu_rows", dpbf16_min_f32_swiglu_rows},
                             {"dpbf16_stream_bytes", dpbf16_stream_bytes},
                             {"dpbf16_tn_group_bytes", dpbf16_tn_group_bytes},
                             {"avx2_panel_cols", avx2_panel_cols},
                             {"amx_stream_bytes", amx_stream_bytes}})
    if (value < 0 || value > (int64_t(1) << 40))
      return Status::error(fmt::format("invalid GEMM threshold {}={}: must be in [0, 2^40]", name, value));
  if (avx2_panel_cols < 16 || avx2_panel_cols % 16 != 0)
    return Status::error(fmt::format(
        "invalid GEMM threshold avx2_panel_cols={}: must be a positive multiple of 16", avx2_panel_cols));
  return Status::ok();
}

namespace {

// (name, value, default) of every threshold, in printing order.
std::vector<std::tuple<const char*, int64_t, int64_t>> threshold_fields(const GemmThresholds& t) {
  const GemmThresholds d;
  return {{"dpbf16_max_group_rows", t.dpbf16_max_group_rows, d.dpbf16_max_group_rows},
          {"dpbf16_min_f32_swiglu_rows", t.dpbf16_min_f32_swiglu_rows, d.dpbf16_min_f32_swiglu_rows},
          {"dpbf16_stream_bytes", t.dpbf16_stream_bytes, d.dpbf16_stream_bytes},
          {"dpbf16_tn_group_bytes", t.dpbf16_tn_group_bytes, d.dpbf16_tn_group_bytes},
          {"avx2_panel_cols", t.avx2_panel_cols, d.avx2_panel_cols},
          {"amx_stream_bytes", t.amx_stream_bytes, d.amx_stream_bytes}};
}

}  // namespace

std::string GemmThresholds::to_text() const {
  std::string s;
  for (const auto& [name, value, _] : threshold_fields(*this))
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, value);
  return s;
}

std::string KernelConfig::to_json() const {
  nlohmann::ordered_json j;
  j["threads"] = threads;
  j["gmm_tile_rows"] = gmm_tile_rows;
  j["gemm_variant"] = gemm_variant;
  j["cuda_gemm_streams"] = cuda_gemm_streams;
  for (const auto& [name, value, default_value] : threshold_fields(thresholds))
    if (value != default_value) j[name] = value;
  return j.dump();
}

}  // namespace moe
