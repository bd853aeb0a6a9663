// The Exchange of each parallel mode and EP comm path (moe/exchange.h), one file each, and what they
// share: metering a collective (its time and the bytes this rank sends, nccl-tests' convention).
#pragma once

#include <chrono>
#include <memory>

#include "moe/exchange.h"

namespace moe {

// parallel_mode none and dp: the all-to-all EP/DP step on a data=R x expert=1 mesh (exchange_dp.cpp).
std::unique_ptr<Exchange> make_dp_exchange(const MoeConfig& cfg, Comm& world);
// ep compact_psum and masked_psum (exchange_compact_psum.cpp), all_to_all (exchange_all_to_all.cpp).
std::unique_ptr<Exchange> make_compact_psum_exchange(const MoeConfig& cfg, Comm& world);
std::unique_ptr<Exchange> make_all_to_all_exchange(const MoeConfig& cfg, Comm& world);
// ep ring_ag_rs (exchange_ring_ag_rs.cpp).
std::unique_ptr<Exchange> make_ring_ag_rs_exchange(const MoeConfig& cfg, Comm& world);

// Bytes a rank sends in a collective over `ranks` ranks of `bytes` (the whole buffer): all-reduce
// 2 (R-1)/R, all-gather and reduce-scatter (R-1)/R of the gathered or scattered total.
inline int64_t all_reduce_bytes(int64_t bytes, int ranks) {
  return 2 * (ranks - 1) * bytes / ranks;
}

// Runs one collective of `kind` on `comm` over a buffer of `elements` of `dtype` (what it sends, sums
// or gathers), adding its wall time and the `bytes` it sends to other ranks to the meter.
template <typename Fn>
Status metered(CommMeter& meter, CollectiveKind kind, Comm& comm, Dtype dtype, int64_t elements,
               int64_t bytes, Fn&& collective) {
  const auto start = std::chrono::steady_clock::now();
  Status s = collective();
  meter.add(kind, comm, dtype, elements, bytes,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return s;
}

// An all-reduce of t over comm, metered.
inline Status metered_all_reduce(CommMeter& meter, Comm& comm, Tensor& t) {
  return metered(meter, CollectiveKind::reduce, comm, t.dtype(), t.numel(),
                 all_reduce_bytes(int64_t(t.bytes()), comm.size()), [&] { return comm.all_reduce_sum(t); });
}

// The base of the EP paths whose ranks pack every token for their own experts (compact_psum,
// ring_ag_rs): no row moves, so the expert FFN runs on the block's own rows, and the row hooks do
// nothing; the paths sum the token side's partial outputs instead.
class EveryTokenExchange : public Exchange {
 public:
  EveryTokenExchange(const MoeConfig& cfg, Comm& world)
      : world_(world),
        layout_(rank_layout(cfg, world.rank(), world.size())),
        expert_cfg_(token_config(cfg, layout_)),
        expert_(world.split(layout_.data_rank, layout_.expert_rank)),
        data_(world.split(layout_.expert_rank, layout_.data_rank)) {}

  const RankLayout& layout() const override { return layout_; }
  MoeConfig expert_config() const override { return expert_cfg_; }
  ExpertRows expert_rows(const ExpertRows& local, Backend&, int64_t) override { return local; }
  Status after_plan(const DispatchPlan&) override { return Status::ok(); }
  Status before_expert_ffn(Tensor&, const DispatchPlan&) override { return Status::ok(); }
  Status after_expert_ffn(Tensor&, const DispatchPlan&) override { return Status::ok(); }
  Status before_expert_ffn_backward(Tensor&, const DispatchPlan&) override { return Status::ok(); }
  Status after_expert_ffn_backward(Tensor&, const DispatchPlan&) override { return Status::ok(); }

 protected:
  Comm& world_;
  RankLayout layout_;
  MoeConfig expert_cfg_;          // the token side's: its own experts, every token's rows
  std::unique_ptr<Comm> expert_;  // the X ranks of its data replica
  std::unique_ptr<Comm> data_;    // the D ranks holding its experts, one per replica
};

// Sums each tensor over `comm`, metered.
inline Status all_reduce_each(CommMeter& meter, Comm& comm, const std::vector<Tensor*>& tensors) {
  for (Tensor* t : tensors) MOE_RETURN_IF_ERROR(metered_all_reduce(meter, comm, *t));
  return Status::ok();
}

}  // namespace moe
