#include "ref/backend.h"

#include <fmt/format.h>

#include "cpu/ops/expert_ffn_int8.h"
#include "cpu/ops/shared_expert_int8.h"
#include "moe/quantize.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

class RefBackend final : public Backend {
 public:
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
        // The cpu op's sequence over the reference's quantization and GEMM rows (the independent oracle of
        // the int8 modes is the float64 block reference, moe/reference.h).
        return cpu::make_int8_expert_ffn(ctx, reference_int8_kernels());
    }
    MOE_CHECK(false, "make_expert_ffn: unknown quant mode");
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return make_combine_op(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    if (quantizes_dense(ctx.cfg.quant_mode))
      return cpu::make_int8_shared_expert(ctx, reference_int8_kernels());
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

  // The cpu int8 ops' sequences over the reference's quantization and GEMM rows (whose nn_s8_swiglu runs
  // SwiGLU in float64; the independent oracle of the int8 modes is the float64 block reference,
  // moe/reference.h).
  cpu::Int8Kernels reference_int8_kernels() {
    return {reference_gemms_, &ref_quant::quantize_rows, &ref_quant::quantize_experts,
            &ref_quant::quantize_columns, &ref_quant::quantize_token_rows};
  }

  // The kernel table with the reference's rows first (every form; nothing measured).
  GemmKernels reference_gemms_{[] {
                                 KernelConfig k;
                                 k.gemm_variant = "ref";
                                 k.tuning_file = "none";
                                 return k;
                               }(),
                               nullptr};

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

Backend& ref_backend() {
  static RefBackend backend;
  return backend;
}

}  // namespace moe::ref
