#include "cpu/backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cpu/gemm/tuning.h"
#include "cpu/ops/combine.h"
#include "cpu/ops/dispatch.h"
#include "cpu/ops/expert_ffn.h"
#include "cpu/ops/expert_ffn_int8.h"
#include "cpu/ops/pack.h"
#include "cpu/ops/shared_expert.h"
#include "cpu/ops/shared_expert_int8.h"
#include "cpu/ops/vec_math.h"
#include "moe/gemm.h"

namespace moe::cpu {
namespace {

Status run_dtype_supported(const Backend& be, const MoeConfig& cfg) {
  if (is_run_dtype(cfg.dtype)) return Status::ok();
  return Status::error(fmt::format("backend {} runs float32, bfloat16 and float16 blocks, not {}", be.name(),
                                   dtype_name(cfg.dtype)));
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::string description() const override {
    return fmt::format("OpenMP kernels ({} threads) + the GEMM kernel table, variant {} ({})",
                       omp_get_max_threads(), current_.gemm_variant, gemm_library_version());
  }
  std::string devices() const override { return "CpuDevice(id=0)"; }
  MemorySpace& memory() override { return host_memory(); }
  void synchronize() override {}

  Status supports(OpKind op, const MoeConfig& cfg) const override {
    return run_dtype_supported(*this, cfg);  // every op in every quant mode and parallel mode
  }

  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override { return make_pack_op(ctx); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override { return make_dispatch_op(ctx); }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override {
    switch (ctx.cfg.quant_mode) {
      case QuantMode::none:
      case QuantMode::int8:  // int8 quantizes the shared expert's GEMMs only
        return ctx.cfg.impl == Impl::ref_dp ? make_ref_dp_expert_ffn(ctx) : make_float_expert_ffn(ctx);
      case QuantMode::int8_routed:
      case QuantMode::int8_all:
      case QuantMode::int8_routed_prequant:
        return make_int8_expert_ffn(ctx, cpu_int8_kernels(ctx.kernel));
    }
    MOE_CHECK(false, "make_expert_ffn: unsupported quant mode (supports() refuses it)");
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return make_combine_op(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    if (quantizes_dense(ctx.cfg.quant_mode))
      return make_int8_shared_expert(ctx, cpu_int8_kernels(ctx.kernel));
    return make_shared_expert_op(ctx);
  }

  void loss_backward(Tensor& dy, Tensor& sum_sq_out, const Tensor& y, int64_t count) override {
    const int64_t n = y.numel();
    float* d = dy.data<float>();
    const float scale = float(2.0 / double(count));
    switch (y.dtype()) {
      case Dtype::f32:
      case Dtype::bf16:
      case Dtype::f16:
        break;
      case Dtype::f64:
      case Dtype::s8:
      case Dtype::s32:
      case Dtype::s64:
        MOE_CHECK(false, std::string("loss_backward: no CPU kernel for ") + dtype_name(y.dtype()));
    }
    // dy (T, H) in f32 is tens of MiB at block sizes, read next by the combine's backward after it has
    // left the caches: whole chunks go out with non-temporal stores.
    constexpr int64_t kChunk = 1024;
    const bool stream =
        size_t(n) * sizeof(float) >= kStreamRowsBytes && streams_lines(d, kChunk * sizeof(float));
    double sum_sq = 0;
#pragma omp parallel reduction(+ : sum_sq)
    {
      alignas(64) float y_chunk[kChunk], dy_chunk[kChunk];
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t len = std::min(kChunk, n - i);
        const float* v = load_row_f32(
            y_chunk, static_cast<const char*>(y.raw()) + size_t(i) * dtype_size(y.dtype()), y.dtype(), len);
#pragma omp simd reduction(+ : sum_sq)
        for (int64_t k = 0; k < len; ++k) {
          sum_sq += double(v[k]) * v[k];
          dy_chunk[k] = scale * v[k];
        }
        if (stream && len == kChunk)
          stream_copy(d + i, dy_chunk, kChunk * sizeof(float));
        else
          std::memcpy(d + i, dy_chunk, size_t(len) * sizeof(float));
      }
      if (stream) end_streams();
    }
    sum_sq_out.data<double>()[0] = sum_sq;
  }

  void convert(Tensor& dst, const Tensor& src) override {
    MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
    convert_elements(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel());
  }

  Dtype gemm_arithmetic(Dtype storage) const override {
    if (storage == Dtype::f16) return Dtype::f32;  // the kernel table widens float16 (f16_widening.h)
    if (storage != Dtype::bf16) return storage;
    return const_cast<CpuBackend*>(this)->table(current_).bf16_arithmetic() ? storage : Dtype::f32;
  }

  void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) override {
    table(current_).dense(c.raw(), c.dtype(), a.raw(), a.dtype(), b.raw(), b.dtype(), a.dim(0), a.dim(1),
                          c.dim(1), false, trans_b);
  }

  Status configure(const KernelConfig& kernel) override {
    MOE_RETURN_IF_ERROR(check_gemm_variant(kernel.gemm_variant));
    MOE_RETURN_IF_ERROR(kernel.thresholds.validate());
    current_ = kernel;
    return Status::ok();
  }

  std::string take_kernel_choices() override {
    std::string s;
    for (auto& [key, t] : tables_)
      if (std::string c = t->take_choices(); !c.empty()) s += (s.empty() ? "" : ",") + c;
    return s;
  }

  int64_t kernel_measurements() const override {
    int64_t n = 0;
    for (const auto& [key, t] : tables_) n += t->measurements();
    return n;
  }

  // One table per KernelConfig (with its tuning file and --tune), one tuner per (file, --tune).
  GemmKernels& table(const KernelConfig& kernel) {
    // Ranks as threads (the thread comm) make their ops, and so ask for tables, at once.
    const std::lock_guard<std::mutex> lock(tables_mutex_);
    const std::string path =
        kernel.tuning_file == "none" ? "none" : GemmTuner::resolve_path(kernel.tuning_file);
    const std::string key =
        fmt::format("{} {} {} {}", kernel.to_json(), kernel.thresholds.to_text(), path, kernel.retune);
    auto it = tables_.find(key);
    if (it != tables_.end()) return *it->second;
    GemmTuner* tuner = nullptr;
    if (path != "none") {
      std::unique_ptr<GemmTuner>& t = tuners_[fmt::format("{} {}", path, kernel.retune)];
      if (!t) t = std::make_unique<GemmTuner>(path, kernel.retune);
      tuner = t.get();
    }
    return *tables_.emplace(key, std::make_unique<GemmKernels>(kernel, tuner)).first->second;
  }

 private:
  KernelConfig current_;
  std::map<std::string, std::unique_ptr<GemmKernels>> tables_;
  std::map<std::string, std::unique_ptr<GemmTuner>> tuners_;
  std::mutex tables_mutex_;
};

CpuBackend& the_cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace

Backend& cpu_backend() {
  return the_cpu_backend();
}

GemmKernels& cpu_gemm_kernels(const KernelConfig& kernel) {
  return the_cpu_backend().table(kernel);
}

}  // namespace moe::cpu
