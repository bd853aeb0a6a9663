#include "cpu/backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/tuning.h"
#include "cpu/ops/combine.h"
#include "cpu/ops/dispatch.h"
#include "cpu/ops/expert_ffn.h"
#include "cpu/ops/expert_ffn_int8.h"
#include "cpu/ops/pack.h"
#include "cpu/ops/shared_expert.h"
#include "cpu/ops/shared_expert_int8.h"
#include "cpu/ops/vec_math.h"

namespace moe::cpu {
namespace {

Status run_dtype_supported(const Backend& be, const MoeConfig& cfg) {
  if (is_run_dtype(cfg.dtype)) return Status::ok();
  return Status::error(fmt::format("backend {} runs float32, bfloat16 and float16 blocks, not {}", be.name(),
                                   dtype_name(cfg.dtype)));
}

}  // namespace

CpuBackend::CpuBackend(const KernelConfig& kernel) : Backend(kernel), table_(kernel) {}

std::string CpuBackend::description() const {
  return fmt::format("OpenMP kernels ({} threads) + the GEMM kernel table, variant {} ({})",
                     omp_get_max_threads(), kernel().gemm_variant, gemm_library_version());
}

Status CpuBackend::supports(OpKind op, const MoeConfig& cfg) const {
  return run_dtype_supported(*this, cfg);  // every op in every quant mode and parallel mode
}

std::unique_ptr<PackOp> CpuBackend::make_pack(const OpContext& ctx) {
  return make_pack_op(ctx);
}

std::unique_ptr<DispatchOp> CpuBackend::make_dispatch(const OpContext& ctx) {
  return make_dispatch_op(ctx);
}

std::unique_ptr<ExpertFfnOp> CpuBackend::make_expert_ffn(const OpContext& ctx) {
  switch (ctx.cfg.quant_mode) {
    case QuantMode::none:
    case QuantMode::int8:  // int8 quantizes the shared expert's GEMMs only
      return ctx.cfg.impl == Impl::ref_dp ? make_ref_dp_expert_ffn(ctx, table_)
                                          : make_float_expert_ffn(ctx, table_);
    case QuantMode::int8_routed:
    case QuantMode::int8_all:
    case QuantMode::int8_routed_prequant:
      return make_int8_expert_ffn(ctx, cpu_int8_kernels(table_));
  }
  MOE_CHECK(false, "make_expert_ffn: unsupported quant mode (supports() refuses it)");
}

std::unique_ptr<CombineOp> CpuBackend::make_combine(const OpContext& ctx) {
  return make_combine_op(ctx);
}

std::unique_ptr<SharedExpertOp> CpuBackend::make_shared_expert(const OpContext& ctx) {
  if (quantizes_dense(ctx.cfg.quant_mode)) return make_int8_shared_expert(ctx, cpu_int8_kernels(table_));
  return make_shared_expert_op(ctx, table_);
}

void CpuBackend::loss_backward(Tensor& dy, Tensor& sum_sq_out, const Tensor& y, int64_t count) {
  const int64_t n = y.numel();
  float* d = dy.data<float>();
  const float scale = float(2.0 / double(count));
  MOE_CHECK(is_run_dtype(y.dtype()),
            std::string("loss_backward: no CPU kernel for ") + dtype_name(y.dtype()));
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

void CpuBackend::convert(Tensor& dst, const Tensor& src) {
  MOE_CHECK(dst.numel() == src.numel(), "convert: element counts differ");
  convert_elements(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel());
}

Dtype CpuBackend::gemm_arithmetic(Dtype storage) const {
  if (storage == Dtype::f16) return Dtype::f32;  // the kernel table widens float16 (f16_widening.h)
  if (storage != Dtype::bf16) return storage;
  return table_.bf16_arithmetic() ? storage : Dtype::f32;
}

void CpuBackend::dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) {
  table_.dense(c.raw(), c.dtype(), a.raw(), a.dtype(), b.raw(), b.dtype(), a.dim(0), a.dim(1), c.dim(1),
               false, trans_b);
}

}  // namespace moe::cpu
