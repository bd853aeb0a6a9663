// modeled_comm_bytes (moe/exchange.h): the comm paths' bytes per rank per call, from the shapes.
#include "comm/exchanges.h"

namespace moe {

int64_t modeled_comm_bytes(const MoeConfig& cfg, int ranks, int64_t real_assignments) {
  if (ranks <= 1) return 0;
  const int64_t R = ranks, T = cfg.tokens, H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts;
  const int64_t S = cfg.shared_expert_dim, es = int64_t(dtype_size(cfg.dtype));
  const bool backward = cfg.bench_pass == BenchPass::forward_backward;
  const int64_t shared_grads = all_reduce_bytes(3 * H * S * es, ranks);
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      return 0;
    case ParallelMode::dp:
      return backward ? all_reduce_bytes(3 * E * H * M * es, ranks) + shared_grads : 0;
    case ParallelMode::ep:
      switch (cfg.ep_comm_path) {
        case EpCommPath::compact_psum:
          return all_reduce_bytes(T * H * 4, ranks) * (backward ? 2 : 1);
        case EpCommPath::all_to_all: {
          const int64_t remote_rows = real_assignments * (R - 1) / (R * R);
          const int64_t forward = 2 * remote_rows * H * es;
          return backward ? forward + remote_rows * H * (es + 4) + shared_grads : forward;
        }
        case EpCommPath::ring_ag_rs: {
          // All-gather of x and reduce-scatter of the f32 output; backward the same of dy and dx (f32).
          const int64_t slice = (R - 1) * T / R * H;
          const int64_t forward = slice * (es + 4);
          return backward ? forward + slice * 8 + shared_grads : forward;
        }
      }
  }
  return 0;
}

}  // namespace moe
