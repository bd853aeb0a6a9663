// The Exchange factory: adding a parallel mode or EP comm path is a new exchange_*.cpp plus its case
// here.
#include "moe/exchange.h"

#include <fmt/format.h>

#include "comm/exchange_single.h"

namespace moe {

Status exchange_supports(const MoeConfig& cfg, const Comm& world) {
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      if (world.size() != 1)
        return Status::error(
            fmt::format("--parallel-mode none runs on one rank, but {} ranks were started", world.size()));
      return Status::ok();
    case ParallelMode::dp:
    case ParallelMode::ep:
      break;
  }
  return Status::error(
      fmt::format("--parallel-mode {} is not implemented yet (only 'none')", name(cfg.parallel_mode)));
}

std::unique_ptr<Exchange> make_exchange(const MoeConfig& cfg, Comm& world) {
  switch (cfg.parallel_mode) {
    case ParallelMode::none:
      return make_single_rank_exchange(world);
    case ParallelMode::dp:
    case ParallelMode::ep:
      break;
  }
  MOE_CHECK(false, "make_exchange: unsupported parallel mode (exchange_supports() refuses it)");
}

}  // namespace moe
