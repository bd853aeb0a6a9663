// gather_results and gather_text (moe/parallel.h): each sliced tensor goes to rank 0 as one all-to-all-v in
// which every rank that owns a slice (the first rank holding it) sends it whole to rank 0, which receives the
// slices in rank order: dim 0 is the sliced one, and the mesh orders ranks as their slices are ordered.
#include <fmt/format.h>

#include <algorithm>

#include "moe/comm.h"
#include "moe/parallel.h"

namespace moe {
namespace {

// global = the slices of dim 0 that the `owner` ranks hold, rows[r] rows each, in rank order (rank
// 0); empty elsewhere. Ranks holding a copy of a lower rank's slice own nothing.
Status gather_rows(Comm& world, const Tensor& local, const std::vector<int64_t>& rows,
                   const std::vector<bool>& owner, Tensor& global) {
  const int R = world.size();
  std::vector<int64_t> shape = local.shape();
  const int64_t row = shape[0] == 0 ? 0 : local.numel() / shape[0];
  std::vector<int64_t> send(size_t(R), 0), recv(size_t(R), 0);
  if (owner[size_t(world.rank())]) send[0] = local.numel();
  int64_t total = 0;
  for (int r = 0; r < R; ++r)
    if (owner[size_t(r)]) {
      total += rows[size_t(r)];
      if (world.rank() == 0) recv[size_t(r)] = rows[size_t(r)] * row;
    }
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
  std::vector<bool> token_owner, expert_owner, first_only;
  for (int r = 0; r < R; ++r) {
    const RankLayout l = rank_layout(cfg, r, R);
    bool new_tokens = true, new_experts = true;
    for (const RankLayout& q : layouts) {
      new_tokens &= q.token_begin != l.token_begin;
      new_experts &= q.expert_begin != l.expert_begin;
    }
    layouts.push_back(l);
    token_rows.push_back(l.tokens);
    expert_rows.push_back(l.experts);
    token_owner.push_back(new_tokens);
    expert_owner.push_back(new_experts);
    first_only.push_back(r == 0);
  }
  MOE_RETURN_IF_ERROR(gather_rows(world, out, token_rows, token_owner, global_out));
  if (!grads) return Status::ok();
  MOE_CHECK(global_grads != nullptr, "gather_results: grads without a place for the global ones");
  MOE_RETURN_IF_ERROR(gather_rows(world, grads->dx, token_rows, token_owner, global_grads->dx));
  MOE_RETURN_IF_ERROR(gather_rows(world, grads->dw1, expert_rows, expert_owner, global_grads->dw1));
  MOE_RETURN_IF_ERROR(gather_rows(world, grads->dw3, expert_rows, expert_owner, global_grads->dw3));
  MOE_RETURN_IF_ERROR(gather_rows(world, grads->dw2, expert_rows, expert_owner, global_grads->dw2));
  // The shared expert's gradients are the same on every rank: rank 0's.
  for (auto [src, dst] : {std::pair{&grads->dsw1, &global_grads->dsw1},
                          {&grads->dsw3, &global_grads->dsw3},
                          {&grads->dsw2, &global_grads->dsw2}}) {
    std::vector<int64_t> rows(size_t(R), src->shape().empty() ? 0 : src->dim(0));
    MOE_RETURN_IF_ERROR(gather_rows(world, *src, rows, first_only, *dst));
  }
  return Status::ok();
}

Status gather_text(Comm& world, const std::string& mine, std::vector<std::string>& all) {
  const int R = world.size();
  Tensor length(Dtype::s64, {1}), lengths(Dtype::s64, {R});
  length.data<int64_t>()[0] = int64_t(mine.size());
  MOE_RETURN_IF_ERROR(world.all_gather(lengths, length));
  const int64_t* n = lengths.data<int64_t>();  // (R)
  std::vector<int64_t> send(size_t(R), 0), recv(size_t(R), 0);
  send[0] = int64_t(mine.size());
  int64_t total = 0;
  if (world.rank() == 0)
    for (int r = 0; r < R; ++r) total += recv[size_t(r)] = n[r];
  Tensor text(Dtype::s8, {std::max<int64_t>(1, int64_t(mine.size()))});
  std::copy(mine.begin(), mine.end(), static_cast<char*>(text.raw()));
  Tensor got(Dtype::s8, {std::max<int64_t>(1, total)});
  MOE_RETURN_IF_ERROR(world.all_to_all_v(got, recv, text, send));
  all.clear();
  if (world.rank() != 0) return Status::ok();
  const char* at = static_cast<const char*>(got.raw());
  for (int r = 0; r < R; ++r, at += n[r - 1]) all.emplace_back(at, size_t(n[r]));
  return Status::ok();
}

}  // namespace moe
