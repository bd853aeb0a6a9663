#include "comm/exchange_single.h"

namespace moe {
namespace {

class SingleRankExchange final : public Exchange {
 public:
  explicit SingleRankExchange(Comm& world)
      : data_(world.split(/*color=*/0, world.rank())), expert_(world.split(/*color=*/0, world.rank())) {}

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
    for (Tensor* g : grads) MOE_RETURN_IF_ERROR(data_->all_reduce_sum(*g));
    return Status::ok();
  }

 private:
  // The whole row buffer goes to the rank that owns every expert: itself.
  Status rows_in_place(Tensor& rows) {
    return expert_->all_to_all_v(rows, {rows.numel()}, rows, {rows.numel()});
  }

  std::unique_ptr<Comm> data_, expert_;
};

}  // namespace

std::unique_ptr<Exchange> make_single_rank_exchange(Comm& world) {
  return std::make_unique<SingleRankExchange>(world);
}

}  // namespace moe
