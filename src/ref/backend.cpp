#include "ref/backend.h"

#include <fmt/format.h>

#include <memory>

#include "ref/ref.h"

namespace moe::ref {
namespace {

class RefBackend final : public Backend {
 public:
  explicit RefBackend(const KernelConfig& kernel) : Backend(kernel) {}
  const char* name() const override { return "ref"; }
  std::string description() const override {
    return "plain scalar loops, float64 accumulation: every op's specification (slow)";
  }
  std::string devices() const override { return "CpuDevice(id=0)"; }
  MemorySpace& memory() override { return host_memory(); }
  void synchronize() override {}

  Status supports(OpKind op, const MoeConfig& cfg) const override {
    if (!is_float(cfg.dtype))
      return Status::error(fmt::format("backend ref runs float blocks, not {}", dtype_name(cfg.dtype)));
    return Status::ok();  // every op in every quant mode and parallel mode
  }

  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override { return make_pack_op(ctx); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override { return make_dispatch_op(ctx); }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override {
    switch (ctx.cfg.quant_mode) {
      case QuantMode::none:
      case QuantMode::int8:  // int8 quantizes the shared expert's GEMMs only
        return make_expert_ffn_op(ctx);
      case QuantMode::int8_routed:
      case QuantMode::int8_all:
      case QuantMode::int8_routed_prequant:
        return make_int8_expert_ffn_op(ctx);
    }
    MOE_CHECK(false, "make_expert_ffn: unknown quant mode");
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return make_combine_op(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    if (quantizes_dense(ctx.cfg.quant_mode)) return make_int8_shared_expert_op(ctx);
    return make_shared_expert_op(ctx);
  }

  void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count) override {
    const int64_t n = y.numel();
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = y.get(i);
      sum += v * v;
      dy.set(i, 2.0 * v / double(count));
    }
    sum_sq.set(0, sum);
  }

  void convert(Tensor& dst, const Tensor& src) override {
    MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
    for (int64_t i = 0; i < src.numel(); ++i) dst.set(i, src.get(i));
  }

  void dense_gemm(Tensor& c, const Tensor& a_in, const Tensor& b_in, bool trans_b) override {
    const int64_t N = c.dim(1), Kd = a_in.dim(1);
    const std::vector<double> a = a_in.to_f64(), b = b_in.to_f64();
    gemm_rows(
        0, a_in.dim(0), Kd, N, [&](int64_t r, int64_t k) { return a[r * Kd + k]; },
        [&](int64_t k, int64_t n) { return trans_b ? b[n * Kd + k] : b[k * N + n]; },
        [&](int64_t r, int64_t n, double v) { c.set(r * N + n, v); });
  }
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend(const KernelConfig& kernel) {
  return std::make_unique<RefBackend>(kernel);
}

}  // namespace moe::ref
