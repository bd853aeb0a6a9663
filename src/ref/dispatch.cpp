// Dispatch from its definition: row r holds x[token(r)] (zeros for padding); the backward adds each
// row's gradient into its token, summed in float64 per token. Both permute modes and both backward
// algorithms of the CPU compute exactly this.
#include "moe/backend.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

class RefDispatch final : public DispatchOp {
 public:
  void forward(Tensor& x_rows, const Tensor& x, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t H = x.dim(1);
    for (int64_t r = 0; r < p.rows; ++r) {
      const int32_t t = p.row_token(r);
      for (int64_t h = 0; h < H; ++h) x_rows.set(r * H + h, t < 0 ? 0.0 : x.get(t * H + h));
    }
  }

  void backward(const TokenSums& dx, const Tensor& dx_rows, const DispatchPlan& plan) override {
    sum_into_tokens(dx, dx_rows, host_view(plan), [](int64_t) { return 1.0; });
  }
};

}  // namespace

std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext&) {
  return std::make_unique<RefDispatch>();
}

}  // namespace moe::ref
