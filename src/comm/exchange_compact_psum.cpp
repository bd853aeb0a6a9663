// ep compact_psum (spec §5.3): every rank holds every token and E/R experts. Its plan places only the
// assignments of its own experts (rank_routing makes the others null ids), its combine sums its rows
// into a (T, H) f32 partial output, and one all-reduce makes the output, replicated. The shared expert
// runs on every rank on the same tokens (as the seed's replicated shared expert) and rank 0's joins the
// sums. Backward: dy is replicated, so each rank's expert gradients are complete; the partial dx sums
// are all-reduced (the transpose of the forward all-reduce). The seed's padding bug (padding counted
// into the first local group) has no counterpart: the plan pads each group at its own tail.
// masked_psum (spec §5.2, the seed's first EP) is this exchange over a plan of every assignment: the
// other ranks' experts' rows are masked (rank_routing: a local id, weight 0), so each rank runs T*K rows
// through its experts instead of its own T*K/R, and moves the same bytes.
#include "comm/exchanges.h"

namespace moe {
namespace {

class CompactPsumExchange final : public EveryTokenExchange {
 public:
  using EveryTokenExchange::EveryTokenExchange;

  bool sums_combined_output() const override { return true; }
  Status after_combine(Tensor& out) override { return all_reduce(out); }
  bool adds_shared() const override { return layout_.expert_rank == 0; }
  bool sums_input_grad() const override { return true; }
  Status reduce_input_grad(Tensor& dx) override { return all_reduce(dx); }
  // Routed gradients are of the rank's own experts, the shared expert's the same on every rank of its
  // replica (the same tokens, the same replicated dy): both are summed over the replicas.
  Status reduce_weight_grads(const std::vector<Tensor*>& grads) override {
    return all_reduce_each(meter_, *data_, grads);
  }

 private:
  Status all_reduce(Tensor& t) { return metered_all_reduce(meter_, *expert_, t); }
};

}  // namespace

std::unique_ptr<Exchange> make_compact_psum_exchange(const MoeConfig& cfg, Comm& world) {
  return std::make_unique<CompactPsumExchange>(cfg, world);
}

}  // namespace moe
