// gather_results (moe/parallel.h): each sliced tensor goes to rank 0 as one all-to-all-v in which
// every rank sends its whole slice to rank 0 and rank 0 receives the slices in rank order (dim 0 is
// the sliced one, so rank order is the global order).
#include <fmt/format.h>

#include "moe/comm.h"
#include "moe/parallel.h"

namespace moe {
namespace {

// global = the ranks' `local` slices of dim 0, of rows[r] rows each (rank 0); empty elsewhere.
Status gather_rows(Comm& world, const Tensor& local, const std::vector<int64_t>& rows, Tensor& global) {
  const int R = world.size();
  std::vector<int64_t> shape = local.shape();
  const int64_t row = shape[0] == 0 ? 0 : local.numel() / shape[0];
  std::vector<int64_t> send(size_t(R), 0), recv(size_t(R), 0);
  send[0] = local.numel();
  int64_t total = 0;
  for (int r = 0; r < R; ++r) total += rows[size_t(r)];
  if (world.rank() == 0)
    for (int r = 0; r < R; ++r) recv[size_t(r)] = rows[size_t(r)] * row;
  shape[0] = world.rank() == 0 ? total : 0;
  global = Tensor(local.dtype(), shape);
  return world.all_to_all_v(global, recv, local, send);
}

}  // namespace

Status gather_results(Comm& world, const MoeConfig& cfg, const Tensor& out, const MoeGrads* grads,
                      Tensor& global_out, MoeGrads* global_grads) {
  const int R = world.size();
  std::vector<RankLayout> layouts;
  std::vector<int64_t> token_rows, expert_rows;
  for (int r = 0; r < R; ++r) {
    layouts.push_back(rank_layout(cfg, r, R));
    token_rows.push_back(layouts.back().tokens);
    expert_rows.push_back(layouts.back().experts);
  }
  const RankLayout& mine = layouts[size_t(world.rank())];
  auto gather = [&](const Tensor& local, bool replicated, const std::vector<int64_t>& rows, Tensor& global) {
    if (!replicated) return gather_rows(world, local, rows, global);
    global = world.rank() == 0 ? local : Tensor(local.dtype(), {0});
    return Status::ok();
  };
  MOE_RETURN_IF_ERROR(gather(out, mine.tokens_replicated, token_rows, global_out));
  if (!grads) return Status::ok();
  MOE_CHECK(global_grads != nullptr, "gather_results: grads without a place for the global ones");
  MOE_RETURN_IF_ERROR(gather(grads->dx, mine.tokens_replicated, token_rows, global_grads->dx));
  MOE_RETURN_IF_ERROR(gather(grads->dw1, mine.experts_replicated, expert_rows, global_grads->dw1));
  MOE_RETURN_IF_ERROR(gather(grads->dw3, mine.experts_replicated, expert_rows, global_grads->dw3));
  MOE_RETURN_IF_ERROR(gather(grads->dw2, mine.experts_replicated, expert_rows, global_grads->dw2));
  for (auto [src, dst] : {std::pair{&grads->dsw1, &global_grads->dsw1},
                          {&grads->dsw3, &global_grads->dsw3},
                          {&grads->dsw2, &global_grads->dsw2}})
    MOE_RETURN_IF_ERROR(gather(*src, true, {}, *dst));
  return Status::ok();
}

}  // namespace moe
