#include "cpu/backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>

#include "cpu/combine.h"
#include "cpu/dispatch.h"
#include "cpu/expert_ffn.h"
#include "cpu/pack.h"
#include "cpu/shared_expert.h"
#include "cpu/vec_math.h"
#include "moe/gemm.h"

namespace moe::cpu {
namespace {

Status run_dtype_supported(const Backend& be, const MoeConfig& cfg) {
  if (is_run_dtype(cfg.dtype)) return Status::ok();
  return Status::error(
      fmt::format("backend {} runs float32 and bfloat16 blocks, not {}", be.name(), dtype_name(cfg.dtype)));
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::string description() const override {
    return fmt::format("OpenMP kernels ({} threads) + GEMMs from {}", omp_get_max_threads(),
                       gemm_library_version());
  }
  std::string devices() const override { return "CpuDevice(id=0)"; }
  MemorySpace& memory() override { return host_memory(); }
  void synchronize() override {}

  Status supports(OpKind op, const MoeConfig& cfg) const override {
    MOE_RETURN_IF_ERROR(run_dtype_supported(*this, cfg));
    return every_op_float_expert_ffn(*this, op, cfg);
  }

  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override { return make_pack_op(ctx); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override { return make_dispatch_op(ctx); }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override {
    switch (ctx.cfg.quant_mode) {
      case QuantMode::none:
        return make_float_expert_ffn(ctx);
      case QuantMode::int8:
      case QuantMode::int8_routed:
      case QuantMode::int8_all:
      case QuantMode::int8_routed_prequant:
        break;
    }
    MOE_CHECK(false, "make_expert_ffn: unsupported quant mode (supports() refuses it)");
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return make_combine_op(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    return make_shared_expert_op(ctx);
  }

  void loss_backward(Tensor& dy, Tensor& sum_sq_out, const Tensor& y) override {
    const int64_t n = y.numel();
    float* d = dy.data<float>();
    const float scale = float(2.0 / double(n));
    double sum_sq = 0;
    switch (y.dtype()) {
      case Dtype::f32: {
        const float* p = y.data<float>();
#pragma omp parallel for simd reduction(+ : sum_sq) schedule(static)
        for (int64_t i = 0; i < n; ++i) {
          sum_sq += double(p[i]) * p[i];
          d[i] = scale * p[i];
        }
        break;
      }
      case Dtype::bf16: {
        const bf16_t* p = y.data<bf16_t>();
#pragma omp parallel for reduction(+ : sum_sq) schedule(static)
        for (int64_t i = 0; i < n; ++i) {
          const float v = bf16_to_f32(p[i]);
          sum_sq += double(v) * v;
          d[i] = scale * v;
        }
        break;
      }
      case Dtype::f64:
      case Dtype::s8:
      case Dtype::s32:
      case Dtype::s64:
        MOE_CHECK(false, std::string("loss_backward: no CPU kernel for ") + dtype_name(y.dtype()));
    }
    sum_sq_out.data<double>()[0] = sum_sq;
  }

  void convert(Tensor& dst, const Tensor& src) override {
    MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
    convert_elements(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel());
  }

  void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) override {
    moe::dense_gemm(c.raw(), c.dtype(), a.raw(), a.dtype(), b.raw(), b.dtype(), a.dim(0), a.dim(1), c.dim(1),
                    false, trans_b);
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace moe::cpu
