// modeled_comm_bytes (moe/exchange.h): the comm paths' bytes per rank per call, from the shapes.
#include "comm/exchanges.h"

namespace moe {

int64_t modeled_comm_bytes(const MoeConfig& cfg, int ranks, int64_t real_assignments) {
  if (ranks <= 1) return 0;
  const auto [D, X] = mesh_of(cfg, ranks);
  const int64_t H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts;
  const int64_t S = cfg.shared_expert_dim, es = int64_t(dtype_size(cfg.dtype));
  const bool backward = cfg.bench_pass == BenchPass::forward_backward;
  // Per data replica: its tokens and assignments, shared among its X expert ranks.
  const int64_t Tg = cfg.tokens / D, Ag = real_assignments / D;
  const int64_t routed_grads = backward ? all_reduce_bytes(3 * (E / X) * H * M * es, D) : 0;
  const int64_t shared_over_world = backward ? all_reduce_bytes(3 * H * S * es, ranks) : 0;
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      return 0;
    case ParallelMode::dp:
      return routed_grads + shared_over_world;
    case ParallelMode::ep:
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
        case EpCommPath::masked_psum: {
          const int64_t shared_over_replicas = backward ? all_reduce_bytes(3 * H * S * es, D) : 0;
          return all_reduce_bytes(Tg * H * 4, X) * (backward ? 2 : 1) + routed_grads + shared_over_replicas;
        }
        case EpCommPath::all_to_all: {
          const int64_t remote_rows = Ag * (X - 1) / (int64_t(X) * X);
          const int64_t forward = 2 * remote_rows * H * es;
          return (backward ? forward + remote_rows * H * (es + 4) : forward) + routed_grads +
                 shared_over_world;
        }
        case EpCommPath::ring_ag_rs: {
          // All-gather of x and reduce-scatter of the f32 output; backward the same of dy and dx (f32).
          const int64_t slice = (X - 1) * Tg / X * H;
          return slice * (es + 4) + (backward ? slice * 8 : 0) + routed_grads + shared_over_world;
        }
      }
  }
  return 0;
}

}  // namespace moe
