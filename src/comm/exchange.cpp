// The Exchange factory: adding a parallel mode or EP comm path is a new exchange_*.cpp plus its case
// here.
#include "moe/exchange.h"

#include "comm/exchanges.h"

namespace moe {

Status Exchange::gather_tokens(const Tensor&, Tensor&) {
  MOE_CHECK(false, "gather_tokens on an exchange whose ranks hold every token they route");
}

Status Exchange::scatter_tokens(const Tensor&, Tensor&, bool) {
  MOE_CHECK(false, "scatter_tokens on an exchange whose ranks hold every token they route");
}

Status Exchange::overlapped_expert_ffn(Tensor&, Tensor&, const DispatchPlan&, const StageTracer&,
                                       const std::function<void(size_t, ExpertRows&)>&) {
  MOE_CHECK(false, "overlapped_expert_ffn on an exchange that does not overlap its experts");
}

Status Exchange::overlapped_expert_ffn_backward(Tensor&, Tensor&, const DispatchPlan&, const StageTracer&,
                                                const std::function<void(size_t, ExpertRows&)>&) {
  MOE_CHECK(false, "overlapped_expert_ffn_backward on an exchange that does not overlap its experts");
}

Status exchange_supports(const MoeConfig& cfg, const Comm& world) {
  return parallel_supports(cfg, world.size());
}

std::unique_ptr<Exchange> make_exchange(const MoeConfig& cfg, Comm& world) {
  MOE_CHECK(exchange_supports(cfg, world).is_ok(), "make_exchange of a configuration the world cannot run");
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
    case ParallelMode::dp:
      return make_dp_exchange(cfg, world);
    case ParallelMode::ep:
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
        // masked_psum moves what compact_psum moves; its plan differs (rank_routing masks, not drops).
        case EpCommPath::masked_psum:
          return make_compact_psum_exchange(cfg, world);
        case EpCommPath::all_to_all:
          return make_all_to_all_exchange(cfg, world);
        case EpCommPath::ring_ag_rs:
          return make_ring_ag_rs_exchange(cfg, world);
      }
      break;
  }
  MOE_CHECK(false, "make_exchange: unsupported comm path (exchange_supports() refuses it)");
}

}  // namespace moe
