#include "moe/parallel.h"

#include <fmt/format.h>

namespace moe {
namespace {

// Whether a rank holds a slice of its data replica's tokens (else all of them).
bool shards_tokens(const MoeConfig& cfg) {
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
    case ParallelMode::dp:
      return false;
    case ParallelMode::ep:
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
        case EpCommPath::masked_psum:
          return false;
        case EpCommPath::ring_ag_rs:
        case EpCommPath::all_to_all:
          return true;
      }
  }
  return false;
}

std::string mode_name(const MoeConfig& cfg) {
  return cfg.parallel_mode == ParallelMode::ep
             ? fmt::format("--parallel-mode ep --ep-comm-path {}", name(cfg.ep_comm_path))
             : fmt::format("--parallel-mode {}", name(cfg.parallel_mode));
}

}  // namespace

std::pair<int, int> mesh_of(const MoeConfig& cfg, int ranks) {
  if (cfg.mesh_data > 0) return {int(cfg.mesh_data), int(cfg.mesh_expert)};
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      return {1, 1};
    case ParallelMode::dp:
      return {ranks, 1};
    case ParallelMode::ep:
      return {1, ranks};
  }
  return {1, 1};
}

Status parallel_supports(const MoeConfig& cfg, int ranks) {
  const std::string mode = mode_name(cfg);
  if (cfg.parallel_mode == ParallelMode::none && ranks != 1)
    return Status::error(fmt::format(
        "--parallel-mode none runs on one rank, but {} ranks were started (use dp or ep)", ranks));
  const auto [D, X] = mesh_of(cfg, ranks);
  if (int64_t(D) * X != ranks)
    return Status::error(fmt::format("{}: --mesh data={},expert={} is {} ranks, but {} were started", mode, D,
                                     X, int64_t(D) * X, ranks));
  if (cfg.parallel_mode == ParallelMode::dp && X != 1)
    return Status::error(fmt::format(
        "--parallel-mode dp replicates every expert (--mesh data={},expert=1); a mesh with expert={} is "
        "--parallel-mode ep",
        ranks, X));
  if (cfg.experts % X != 0)
    return Status::error(
        fmt::format("{}: --experts={} must be divisible by the {} expert ranks", mode, cfg.experts, X));
  const int64_t slices = shards_tokens(cfg) ? ranks : D;
  if (cfg.parallel_mode == ParallelMode::ep && cfg.ep_comm_path == EpCommPath::ring_ag_rs &&
      cfg.tokens % ranks != 0)
    return Status::error(
        fmt::format("{}: --tokens={} must be divisible by the {} ranks", mode, cfg.tokens, ranks));
  if (cfg.tokens < slices)
    return Status::error(fmt::format("{}: --tokens={} cannot be split over {} ranks (each needs a token)",
                                     mode, cfg.tokens, slices));
  if (cfg.ep_overlap > 1 &&
      (cfg.parallel_mode != ParallelMode::ep || cfg.ep_comm_path != EpCommPath::all_to_all))
    return Status::error(
        fmt::format("{}: --ep-overlap={} overlaps the rows' all-to-all with the experts: "
                    "--parallel-mode ep --ep-comm-path all_to_all only",
                    mode, cfg.ep_overlap));
  if (cfg.capacity_active() && cfg.parallel_mode != ParallelMode::none)
    return Status::error(fmt::format("{}: --capacity-policy {} is not implemented yet for parallel runs",
                                     mode, name(cfg.capacity_policy)));
  return Status::ok();
}

RankLayout rank_layout(const MoeConfig& cfg, int rank, int ranks) {
  MOE_CHECK(parallel_supports(cfg, ranks).is_ok(), "rank_layout of a configuration the ranks cannot run");
  MOE_CHECK(rank >= 0 && rank < ranks, "rank_layout: rank out of range");
  const auto [D, X] = mesh_of(cfg, ranks);
  RankLayout l;
  l.rank = rank;
  l.ranks = ranks;
  l.mesh_data = D;
  l.mesh_expert = X;
  l.data_rank = rank / X;
  l.expert_rank = rank % X;
  // Data replica d holds tokens [d T/D, (d+1) T/D); within it, a rank holds all of them or its slice.
  l.group_token_begin = cfg.tokens * l.data_rank / D;
  l.group_tokens = cfg.tokens * (l.data_rank + 1) / D - l.group_token_begin;
  l.tokens_replicated = !shards_tokens(cfg);
  if (l.tokens_replicated) {
    l.token_begin = l.group_token_begin;
    l.tokens = l.group_tokens;
  } else {
    l.token_begin = l.group_token_begin + l.group_tokens * l.expert_rank / X;
    l.tokens = l.group_token_begin + l.group_tokens * (l.expert_rank + 1) / X - l.token_begin;
  }
  l.experts_replicated = X == 1 && cfg.parallel_mode != ParallelMode::ep;
  l.experts = cfg.experts / X;
  l.expert_begin = l.experts * l.expert_rank;
  l.gathers_tokens = cfg.parallel_mode == ParallelMode::ep && cfg.ep_comm_path == EpCommPath::ring_ag_rs;
  l.masks_other_experts =
      cfg.parallel_mode == ParallelMode::ep && cfg.ep_comm_path == EpCommPath::masked_psum;
  return l;
}

std::string describe(const RankLayout& l) {
  return fmt::format("tokens=[{},{}) experts=[{},{})", l.token_begin, l.token_begin + l.tokens,
                     l.expert_begin, l.expert_begin + l.experts);
}

MoeConfig rank_config(const MoeConfig& cfg, const RankLayout& l) {
  MoeConfig c = cfg;
  c.tokens = l.tokens;
  c.experts = l.experts;
  return c;
}

MoeConfig token_config(const MoeConfig& cfg, const RankLayout& l) {
  MoeConfig c = rank_config(cfg, l);
  if (l.gathers_tokens)
    c.tokens = l.group_tokens;
  else if (!l.tokens_replicated)
    c.experts = cfg.experts;
  return c;
}

MoeInputs make_rank_inputs(const MoeConfig& cfg, const RankLayout& l) {
  return make_inputs_slice(cfg, l.token_begin, l.tokens, l.expert_begin, l.experts);
}

Routing rank_routing(const Routing& global, const RankLayout& l) {
  const int64_t K = global.topk;
  const int64_t begin = l.gathers_tokens ? l.group_token_begin : l.token_begin;
  const int64_t tokens = l.gathers_tokens ? l.group_tokens : l.tokens;
  Routing r;
  r.tokens = tokens;
  r.topk = K;
  r.experts = global.experts;
  r.ids.assign(global.ids.begin() + begin * K, global.ids.begin() + (begin + tokens) * K);
  r.weights.assign(global.weights.begin() + begin * K, global.weights.begin() + (begin + tokens) * K);
  if ((l.tokens_replicated || l.gathers_tokens) && !l.experts_replicated) {
    // Local expert ids; every other assignment (and every null one) becomes the null id l.experts,
    // one value, so pack's ordering of null ids has nothing to sort.
    r.experts = l.experts;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      int32_t& id = r.ids[i];
      const int64_t local = int64_t(id) - l.expert_begin;
      if (local >= 0 && local < l.experts) {
        id = int32_t(local);
      } else if (l.masks_other_experts && id >= 0 && id < global.experts) {
        // The seed's masked dispatch: the row is computed (spread over the local experts) and weighs 0.
        id = int32_t(id % l.experts);
        r.weights[i] = 0;
      } else {
        id = int32_t(l.experts);
      }
    }
  }
  return r;
}

}  // namespace moe
