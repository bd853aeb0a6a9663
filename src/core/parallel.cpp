#include "moe/parallel.h"

#include <fmt/format.h>

namespace moe {
namespace {

bool shards_tokens(const MoeConfig& cfg) {
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      return false;
    case ParallelMode::dp:
      return true;
    case ParallelMode::ep:
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
          return false;
        case EpCommPath::ring_ag_rs:
        case EpCommPath::all_to_all:
          return true;
      }
  }
  return false;
}

}  // namespace

Status parallel_supports(const MoeConfig& cfg, int ranks) {
  const std::string mode = cfg.parallel_mode == ParallelMode::ep
                               ? fmt::format("--parallel-mode ep --ep-comm-path {}", name(cfg.ep_comm_path))
                               : fmt::format("--parallel-mode {}", name(cfg.parallel_mode));
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      if (ranks != 1)
        return Status::error(fmt::format(
            "--parallel-mode none runs on one rank, but {} ranks were started (use dp or ep)", ranks));
      return Status::ok();
    case ParallelMode::dp:
      break;
    case ParallelMode::ep:
      if (cfg.experts % ranks != 0)
        return Status::error(
            fmt::format("{}: --experts={} must be divisible by the {} ranks", mode, cfg.experts, ranks));
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
        case EpCommPath::all_to_all:
          break;
        case EpCommPath::ring_ag_rs:
          if (cfg.tokens % ranks != 0)
            return Status::error(
                fmt::format("{}: --tokens={} must be divisible by the {} ranks", mode, cfg.tokens, ranks));
          break;
      }
      break;
  }
  if (shards_tokens(cfg) && cfg.tokens < ranks)
    return Status::error(fmt::format("{}: --tokens={} cannot be split over {} ranks (each needs a token)",
                                     mode, cfg.tokens, ranks));
  if (cfg.capacity_active())
    return Status::error(fmt::format("{}: --capacity-policy {} is not implemented yet for parallel runs",
                                     mode, name(cfg.capacity_policy)));
  return Status::ok();
}

RankLayout rank_layout(const MoeConfig& cfg, int rank, int ranks) {
  MOE_CHECK(parallel_supports(cfg, ranks).is_ok(), "rank_layout of a configuration the ranks cannot run");
  MOE_CHECK(rank >= 0 && rank < ranks, "rank_layout: rank out of range");
  RankLayout l;
  l.rank = rank;
  l.ranks = ranks;
  l.tokens_replicated = !shards_tokens(cfg);
  if (l.tokens_replicated) {
    l.tokens = cfg.tokens;
  } else {
    l.token_begin = cfg.tokens * rank / ranks;
    l.tokens = cfg.tokens * (rank + 1) / ranks - l.token_begin;
  }
  l.experts_replicated = cfg.parallel_mode != ParallelMode::ep;
  l.experts = l.experts_replicated ? cfg.experts : cfg.experts / ranks;
  l.expert_begin = l.experts_replicated ? 0 : l.experts * rank;
  l.gathers_tokens = cfg.parallel_mode == ParallelMode::ep && cfg.ep_comm_path == EpCommPath::ring_ag_rs;
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
    c.tokens = cfg.tokens;
  else if (!l.tokens_replicated)
    c.experts = cfg.experts;
  return c;
}

MoeInputs make_rank_inputs(const MoeConfig& cfg, const RankLayout& l) {
  return make_inputs_slice(cfg, l.token_begin, l.tokens, l.expert_begin, l.experts);
}

Routing rank_routing(const Routing& global, const RankLayout& l) {
  const int64_t K = global.topk;
  const int64_t begin = l.gathers_tokens ? 0 : l.token_begin,
                tokens = l.gathers_tokens ? global.tokens : l.tokens;
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
    for (int32_t& id : r.ids) {
      const int64_t local = int64_t(id) - l.expert_begin;
      id = int32_t(local >= 0 && local < l.experts ? local : l.experts);
    }
  }
  return r;
}

}  // namespace moe
