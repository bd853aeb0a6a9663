// What to compute (MoeConfig: the seed harness's problem parameters, one run) apart from how it is
// scheduled (KernelConfig: threads, tiles, kernel variants). Both validate and print themselves.
// Dimension alphabet: T tokens, H hidden, M mlp_dim, E experts, K topk, S shared dim, A = T*K.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/dtype.h"
#include "moe/name_table.h"
#include "moe/status.h"

namespace moe {

enum class Distribution { random, runs };
// ref_dp: the seed's DP baseline of its profile harness (spec §5.5), not of the hillclimb matrix: its
// routing (softmax over E, then top-k), every expert group padded to 256-row blocks and a static block
// count, per-block weight copies, forward and JAX's autodiff of it (docs/design.md, "The seed's DP
// baseline").
enum class Impl { baseline, fused_w13, preweight, fused_w13_preweight, scatter, fast, ref_dp };
enum class GemmBackend { gmm, ragged_dot };
enum class PackStrategy { argsort, tuple_sort, expert_score_sort };
enum class PermuteMode { direct_take, repeat_sort };
enum class CapacityPolicy { none, drop, pad };
enum class RematMode { none, expert_mlp, combine };
enum class BenchPass { forward, forward_backward };
// Roadmap axes (docs/roadmap in ../shared): every value parses, and what is not built yet is refused
// with one line by the part that would run it (a backend's supports(), make_exchange()).
enum class QuantMode { none, int8, int8_routed, int8_all, int8_routed_prequant };
// How a bfloat16 run multiplies float32 activations (JAX's names). default_precision: the operands are
// rounded to bf16 and accumulated in f32 (one bf16 pass: what JAX's default precision does on TPU, so
// what the seed's TPU numbers measured); highest: true float32 products. Only the shared expert has
// float32 activations that reach a matmul; float32 runs multiply in float32 either way.
enum class MatmulPrecision { default_precision, highest };
enum class ParallelMode { none, dp, ep };
enum class EpCommPath { compact_psum, ring_ag_rs, all_to_all, masked_psum };

enum class NullRoutingMode { independent, take_until_null };

const char* name(NullRoutingMode v);
std::optional<NullRoutingMode> parse_null_routing_mode(std::string_view s);

struct NullRoutingConfig {
  double frac = 0;           // f, target fraction of the T*K assignments routed to null (0 disables)
  int64_t null_experts = 0;  // M0, number of null slots; 0 derives it from E and f
  uint64_t seed = 0;         // --null-route-seed in [0, 2^32), folded into the mask key
  NullRoutingMode mode = NullRoutingMode::independent;
  bool renormalize = false;  // rescale each token's remaining real weights to sum to 1
};

// Names exactly as the seed's flags spell them (these tables; NameTable::parse returns nullopt for unknown
// ones).
inline constexpr NameTable<Distribution, 2> kDistributions{
    {{{Distribution::random, "random"}, {Distribution::runs, "runs"}}}};
inline constexpr NameTable<Impl, 7> kImpls{{{{Impl::baseline, "baseline"},
                                             {Impl::fused_w13, "fused_w13"},
                                             {Impl::preweight, "preweight"},
                                             {Impl::fused_w13_preweight, "fused_w13_preweight"},
                                             {Impl::scatter, "scatter"},
                                             {Impl::fast, "fast"},
                                             {Impl::ref_dp, "ref_dp"}}}};
inline constexpr NameTable<GemmBackend, 2> kGemmBackends{
    {{{GemmBackend::gmm, "gmm"}, {GemmBackend::ragged_dot, "ragged_dot"}}}};
inline constexpr NameTable<PackStrategy, 3> kPackStrategies{
    {{{PackStrategy::argsort, "argsort"},
      {PackStrategy::tuple_sort, "tuple_sort"},
      {PackStrategy::expert_score_sort, "expert_score_sort"}}}};
inline constexpr NameTable<PermuteMode, 2> kPermuteModes{
    {{{PermuteMode::direct_take, "direct_take"}, {PermuteMode::repeat_sort, "repeat_sort"}}}};
inline constexpr NameTable<CapacityPolicy, 3> kCapacityPolicies{
    {{{CapacityPolicy::none, "none"}, {CapacityPolicy::drop, "drop"}, {CapacityPolicy::pad, "pad"}}}};
inline constexpr NameTable<RematMode, 3> kRematModes{
    {{{RematMode::none, "none"}, {RematMode::expert_mlp, "expert_mlp"}, {RematMode::combine, "combine"}}}};
inline constexpr NameTable<BenchPass, 2> kBenchPasses{
    {{{BenchPass::forward, "forward"}, {BenchPass::forward_backward, "forward_backward"}}}};

inline constexpr NameTable<QuantMode, 5> kQuantModes{
    {{{QuantMode::none, "none"},
      {QuantMode::int8, "int8"},
      {QuantMode::int8_routed, "int8_routed"},
      {QuantMode::int8_all, "int8_all"},
      {QuantMode::int8_routed_prequant, "int8_routed_prequant"}}}};
inline constexpr NameTable<MatmulPrecision, 2> kMatmulPrecisions{
    {{{MatmulPrecision::default_precision, "default"}, {MatmulPrecision::highest, "highest"}}}};
inline constexpr NameTable<ParallelMode, 3> kParallelModes{
    {{{ParallelMode::none, "none"}, {ParallelMode::dp, "dp"}, {ParallelMode::ep, "ep"}}}};
inline constexpr NameTable<EpCommPath, 4> kEpCommPaths{{{{EpCommPath::compact_psum, "compact_psum"},
                                                         {EpCommPath::ring_ag_rs, "ring_ag_rs"},
                                                         {EpCommPath::all_to_all, "all_to_all"},
                                                         {EpCommPath::masked_psum, "masked_psum"}}}};
inline constexpr NameTable<NullRoutingMode, 2> kNullRoutingModes{
    {{{NullRoutingMode::independent, "independent"}, {NullRoutingMode::take_until_null, "take_until_null"}}}};
const char* name(Distribution v);
const char* name(Impl v);
const char* name(GemmBackend v);
const char* name(PackStrategy v);
const char* name(PermuteMode v);
const char* name(CapacityPolicy v);
const char* name(RematMode v);
const char* name(BenchPass v);
const char* name(QuantMode v);
// Whether the routed expert GEMMs run in int8 (int8_routed, int8_all, int8_routed_prequant).
bool routed_int8(QuantMode mode);
// Whether the shared expert's (dense) GEMMs run in int8 (int8, int8_all).
bool quantizes_dense(QuantMode mode);
const char* name(MatmulPrecision v);
const char* name(ParallelMode v);
const char* name(EpCommPath v);
std::optional<Distribution> parse_distribution(std::string_view s);
std::optional<Impl> parse_impl(std::string_view s);

extern const std::vector<Impl> kAllImpls;  // the order `--impl both` runs them in (not ref_dp)

// The seed's impl matrix (spec §3.4).
struct ImplTraits {
  bool fuse_w13;
  bool preweight;
  bool scatter_combine;
};
ImplTraits impl_traits(Impl impl);

struct MoeConfig {
  int64_t tokens = 32768;         // T
  int64_t hidden = 2048;          // H
  int64_t mlp_dim = 4096;         // M
  int64_t experts = 8;            // E
  int64_t topk = 4;               // K
  int64_t shared_expert_dim = 0;  // S (0: no shared expert)
  bool shared_fused = false;
  Dtype dtype = Dtype::bf16;
  GemmBackend gemm_backend = GemmBackend::gmm;  // the seed's --backend: which grouped-GEMM API (and layout)
  Impl impl = Impl::fused_w13;
  Distribution distribution = Distribution::random;
  BenchPass bench_pass = BenchPass::forward;
  PackStrategy pack_strategy = PackStrategy::argsort;
  PermuteMode permute_mode = PermuteMode::direct_take;
  // repeat_sort's backward as a gather through the inverse permutation instead of a scatter-add
  // (the seed's custom VJP; it does not change direct_take, whose backward stays a scatter-add).
  bool use_custom_sort_vjp = false;
  RematMode remat_mode = RematMode::none;
  CapacityPolicy capacity_policy = CapacityPolicy::none;
  double capacity_factor = 0.0;
  double run_alpha = 0.98;
  double run_noise_scale = 0.35;
  int64_t seed = 0;                // any int64, as the seed's jax.random.PRNGKey accepts
  NullRoutingConfig null_routing;  // issue 4; frac 0 = off
  std::string device = "cpu";      // the Backend that runs the block (moe/backend.h), `--device`
  QuantMode quant_mode = QuantMode::none;
  MatmulPrecision matmul_precision = MatmulPrecision::default_precision;
  ParallelMode parallel_mode = ParallelMode::none;
  EpCommPath ep_comm_path = EpCommPath::compact_psum;  // meaningful with parallel_mode ep only
  // --mesh data=D,expert=X: the ranks as D data replicas of X expert shards (D * X ranks); 0 x 0: the
  // mode's own (dp: R x 1, ep: 1 x R). In the config's JSON only when given (run_ids of runs without
  // it are unchanged).
  int64_t mesh_data = 0, mesh_expert = 0;
  // --ep-overlap N (ep all_to_all, forward): the rows travel in N chunks, each chunk's dispatch
  // overlapping the experts of the one before (1: no overlap). In the config's JSON only where not 1.
  int64_t ep_overlap = 1;
  // --renormalize-topk (impl ref_dp): the seed's profile harness rescales the K selected softmax
  // probabilities to sum to 1 (its flag); without it they are the probabilities over all E. In the
  // config's JSON for ref_dp only (every other impl's weights are the softmax over the K selected).
  bool renormalize_topk = false;

  int64_t assignments() const { return tokens * topk; }
  // The dtype float32 activations are rounded to where a matmul reads them (matmul_precision).
  Dtype matmul_activation_dtype() const;
  bool has_shared() const { return shared_expert_dim > 0; }
  // Whether the expert FFN's backward recomputes h and g instead of keeping them (remat expert_mlp).
  bool recomputes_expert_mlp() const {
    return bench_pass == BenchPass::forward_backward && remat_mode == RematMode::expert_mlp;
  }
  // cap = max(1, ceil(cf*A/E)) when capacity is active, else 0 (spec §3.3).
  int64_t capacity() const;
  bool capacity_active() const { return capacity_policy != CapacityPolicy::none && capacity_factor > 0; }
  bool null_routing_active() const { return null_routing.frac > 0; }
  // Scatter combine is forced by capacity=pad and by null routing (spec §3.4).
  bool uses_scatter_combine() const;

  // Bytes the forward_backward working set needs, as an upper bound, to refuse runs that cannot fit.
  double estimated_bytes() const;
  Status validate() const;
  std::string to_json() const;
};
// Whether any GEMM of a block of cfg runs in int8 (int8 without a shared expert runs none's GEMMs).
bool any_int8_gemm(const MoeConfig& cfg);

// The thresholds at which the cpu backend's GEMM kernels change course. Each was measured on one
// machine (docs/kernels.md names it); they live here, not as constants in the kernels, so a run prints
// them (rows' gemm_thresholds, --list) and a test or a tuning session can move them.
struct GemmThresholds {
  // dpbf16's rows take groups of at most this many live rows (its per-thread partial sums are sized by
  // it); larger groups go to the next row of the table (oneDNN). 2-core Zen 5, the kernels log (git show
  // 26fb9b0:docs/kernels.md), session 5.
  int64_t dpbf16_max_group_rows = 1536;
  // dpbf16's float32 nn_swiglu takes groups from this many rows (oneDNN's nn + SwiGLU was faster below;
  // session 8).
  int64_t dpbf16_min_f32_swiglu_rows = 384;
  // dpbf16's outputs of this many bytes or more leave with non-temporal stores (more than the L2 caches
  // of a couple of cores hold; session 6).
  int64_t dpbf16_stream_bytes = int64_t(2) << 20;
  // dpbf16's tn packs dout in groups of tiles of this many bytes, half a Zen 4/5 L2 (1 MiB, 512 KiB and
  // 256 KiB measured 0.97-0.99, 1.00-1.01 and 1.00-1.01 of oneDNN at 1024 x 1024 x 1024).
  int64_t dpbf16_tn_group_bytes = int64_t(512) << 10;
  // avx2's widest column panel (a multiple of 16): a thread stages a chunk of rows once for this many of
  // its output columns (a group's rows go in passes, or the panel narrows, where their partial sums over
  // it would pass 16 MiB). 2-core Zen 3, the kernels log (git show 26fb9b0:docs/kernels.md), sessions 19-20.
  int64_t avx2_panel_cols = 2048;
  // amx's nn outputs, nn_swiglu's g and tn's weight gradients of this many bytes or more leave with
  // non-temporal stores: a T 512 forward's down projection (16 MiB of bf16 rows) 20.8-21.2 -> 19.2-19.5 ms,
  // each line no longer read before it is overwritten (AMX Xeon, 2 threads, Qwen3-30B-A3B).
  int64_t amx_stream_bytes = int64_t(2) << 20;

  bool operator==(const GemmThresholds&) const = default;
  Status validate() const;
  // "dpbf16_max_group_rows=1536 ..." (rows' gemm_thresholds, --list).
  std::string to_text() const;
};

// Scheduling: never changes results beyond floating-point reassociation.
struct KernelConfig {
  int threads = 0;                    // 0: all cores
  int64_t gmm_tile_rows = 64;         // gmm backend: each expert group padded to a multiple of this
  std::string gemm_variant = "auto";  // a name from gemm_variants() (cpu/gemm/gemm.h); auto = measured
  int cuda_gemm_streams = 4;          // cuda: streams a grouped GEMM spreads its per-expert GEMMs over
  GemmThresholds thresholds;
  // How `auto` learns which variant is fastest per GEMM form and shape class (docs/design.md, "Kernel
  // table"): the tuning file (empty: MOE_TUNING_FILE, else $XDG_CACHE_HOME or ~/.cache
  // /moe-bench/tuning.json; "none": no file and no measuring, auto takes the table's order), and
  // retune (--tune): measure every class this process meets again and replace the file's entries.
  // Neither is part of a run's identity: rows name the kernels that ran (gemm_kernels).
  std::string tuning_file;
  bool retune = false;
  // How this process's OpenMP threads wait between parallel regions (spin, passive, bounded; "" where the
  // caller does not say): part of the tuning file's key, since a few-row call's short parallel regions cost
  // differently under each (the AMX host's Qwen3-30B-A3B 1-token down, tuned in a passive process, kept
  // dpbf16 at half gemv's speed in later spinning ones). The harness fills it from the settled policy; rows
  // carry it as wait_policy, and it is not part of a run's identity either.
  std::string wait_policy;

  Status validate() const;
  // threads, gmm_tile_rows, gemm_variant, cuda_gemm_streams, and each threshold that differs from its
  // default (so the run_ids of default configurations stay those of stores written before the
  // thresholds moved here; run_id.cpp leaves cuda_gemm_streams out at its default for the same reason).
  std::string to_json() const;
};

}  // namespace moe
