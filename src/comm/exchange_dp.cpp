// parallel_mode none and dp: the all-to-all EP/DP step on a data=R x expert=1 mesh. Every hook issues
// the collective that step issues over the expert group (this rank alone), in place, so no row moves
// and nothing is copied, but the calls, counts and buffers are those a multi-rank path fills in; the
// weight gradients, of weights every data rank holds, are summed over the data group (the world).
// With one rank (none) nothing moves at all.
#include "comm/exchanges.h"

namespace moe {
namespace {

class DpExchange final : public Exchange {
 public:
  DpExchange(const MoeConfig& cfg, Comm& world)
      : layout_(rank_layout(cfg, world.rank(), world.size())),
        expert_cfg_(rank_config(cfg, layout_)),
        data_(world.split(/*color=*/0, world.rank())),
        expert_(world.split(/*color=*/world.rank(), 0)) {}

  const RankLayout& layout() const override { return layout_; }
  MoeConfig expert_config() const override { return expert_cfg_; }
  ExpertRows expert_rows(const ExpertRows& local, Backend&, int64_t) override { return local; }

  // Each rank tells each expert owner how many rows it sends: here the plan's own row count, to itself.
  Status after_plan(const DispatchPlan& plan) override {
    Tensor rows = plan.stats;  // stats[0] = rows
    return expert_->all_to_all_v(rows, {1}, rows, {1});
  }
  Status before_expert_ffn(Tensor& x_rows, const DispatchPlan&) override { return rows_in_place(x_rows); }
  Status after_expert_ffn(Tensor& y_rows, const DispatchPlan&) override { return rows_in_place(y_rows); }
  // One expert group of one rank holds every expert: the combined output is already complete.
  bool sums_combined_output() const override { return false; }
  Status after_combine(Tensor&) override { return Status::ok(); }
  bool adds_shared() const override { return true; }
  Status before_expert_ffn_backward(Tensor& dy_rows, const DispatchPlan&) override {
    return rows_in_place(dy_rows);
  }
  Status after_expert_ffn_backward(Tensor& dx_rows, const DispatchPlan&) override {
    return rows_in_place(dx_rows);
  }
  // Tokens are not replicated across ranks, so dx needs no reduction.
  bool sums_input_grad() const override { return false; }
  Status reduce_input_grad(Tensor&) override { return Status::ok(); }
  // Data parallelism: every data rank holds the same weights, so their gradients are summed.
  Status reduce_weight_grads(const std::vector<Tensor*>& grads) override {
    return all_reduce_each(meter_, *data_, grads);
  }

 private:
  // The whole row buffer goes to the rank that owns every expert: itself.
  Status rows_in_place(Tensor& rows) {
    return expert_->all_to_all_v(rows, {rows.numel()}, rows, {rows.numel()});
  }

  RankLayout layout_;
  MoeConfig expert_cfg_;
  std::unique_ptr<Comm> data_, expert_;
};

}  // namespace

std::unique_ptr<Exchange> make_dp_exchange(const MoeConfig& cfg, Comm& world) {
  return std::make_unique<DpExchange>(cfg, world);
}

}  // namespace moe
