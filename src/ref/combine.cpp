// Combine from its definition (spec §3.5): out[t] = start[t] + sum over the token's live rows of weight *
// y_row, summed in float64. The weight is 1 for preweight impls (the rows carry it), the plan's run-dtype row
// weight for the scatter algorithm and the f32 routing weight for unsort, as on the CPU.
#include "moe/backend.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

class RefCombine final : public CombineOp {
 public:
  explicit RefCombine(const OpContext& ctx)
      : scatter_(ctx.cfg.uses_scatter_combine()), preweighted_(impl_traits(ctx.cfg.impl).preweight) {}

  void forward(const TokenSums& out, const Tensor& y_rows, const DispatchPlan& plan,
               const RoutingTensors& routing) override {
    const HostPlan p = host_view(plan);
    sum_into_tokens(out, y_rows, p, [&](int64_t r) { return weight(p, routing, r); });
  }

  void backward(Tensor& dy_rows, const Tensor& dy, const DispatchPlan& plan,
                const RoutingTensors& routing) override {
    const HostPlan p = host_view(plan);
    const int64_t H = dy.dim(1);
    for (int64_t r = 0; r < p.rows; ++r) {
      const int32_t t = p.row_token(r);
      for (int64_t h = 0; h < H; ++h)
        dy_rows.set(r * H + h, t < 0 ? 0.0 : weight(p, routing, r) * dy.get(t * H + h));
    }
  }

 private:
  double weight(const HostPlan& p, const RoutingTensors& routing, int64_t r) const {
    if (preweighted_) return 1.0;
    return scatter_ ? p.row_weight[r] : routing.weights.get(p.row_assignment[r]);
  }

  bool scatter_, preweighted_;
};

}  // namespace

std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx) {
  return std::make_unique<RefCombine>(ctx);
}

}  // namespace moe::ref
