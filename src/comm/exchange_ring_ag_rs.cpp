// ep ring_ag_rs (spec §5.4): tokens and experts sharded (T % R == 0). Each rank all-gathers x, packs
// every token for its own experts (rank_routing makes the others' null ids, as compact_psum), sums its
// rows into a (T, H) f32 partial output and reduce-scatters it, so each rank ends with its own tokens'
// output; the shared expert runs on the rank's own tokens only and joins its slice (the seed's
// `out_shard += shared(x_loc)`). Backward: dy is all-gathered (the transpose of the reduce-scatter), the
// partial dx sums are reduce-scattered (the transpose of the all-gather), the shared expert's weight
// gradients are all-reduced (its weights are replicated, its tokens sharded).
#include "comm/exchanges.h"

namespace moe {
namespace {

class RingExchange final : public EveryTokenExchange {
 public:
  using EveryTokenExchange::EveryTokenExchange;

  // The block's split token side (gather_tokens, scatter_tokens) does the sums.
  bool sums_combined_output() const override { return false; }
  Status after_combine(Tensor&) override { return Status::ok(); }
  bool adds_shared() const override { return true; }
  bool sums_input_grad() const override { return false; }
  Status reduce_input_grad(Tensor&) override { return Status::ok(); }
  // Routed gradients over the replicas holding the same experts; the shared expert's (its tokens
  // differ on every rank) over every rank.
  Status reduce_weight_grads(const std::vector<Tensor*>& grads) override {
    MOE_RETURN_IF_ERROR(all_reduce_each(meter_, *data_, {grads.begin(), grads.begin() + 3}));
    return all_reduce_each(meter_, world_, {grads.begin() + 3, grads.end()});
  }

  bool gathers_tokens() const override { return true; }
  Status gather_tokens(const Tensor& held, Tensor& all) override {
    return metered(meter_, CollectiveKind::reduce, *expert_, all.dtype(), all.numel(),
                   int64_t(all.bytes() - held.bytes()), [&] { return expert_->all_gather(all, held); });
  }
  Status scatter_tokens(const Tensor& all, Tensor& held, bool held_holds_start) override {
    const int64_t bytes = int64_t(all.bytes()) * (expert_->size() - 1) / expert_->size();
    if (!held_holds_start)
      return metered(meter_, CollectiveKind::reduce, *expert_, all.dtype(), all.numel(), bytes,
                     [&] { return expert_->reduce_scatter_sum(held, all); });
    if (slice_.shape() != held.shape()) slice_ = Tensor(Dtype::f32, held.shape(), held.memory());
    MOE_RETURN_IF_ERROR(metered(meter_, CollectiveKind::reduce, *expert_, all.dtype(), all.numel(), bytes,
                                [&] { return expert_->reduce_scatter_sum(slice_, all); }));
    float* h = held.data<float>();          // (T/R, H) f32
    const float* s = slice_.data<float>();  // (T/R, H) f32
    const int64_t n = held.numel();
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) h[i] += s[i];
    return Status::ok();
  }

 private:
  Tensor slice_;  // (T/R, H) f32: the reduce-scattered sums before the shared expert's start joins them
};

}  // namespace

std::unique_ptr<Exchange> make_ring_ag_rs_exchange(const MoeConfig& cfg, Comm& world) {
  return std::make_unique<RingExchange>(cfg, world);
}

}  // namespace moe
