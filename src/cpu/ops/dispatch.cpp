#include "cpu/ops/dispatch.h"

#include <cstring>

#include "cpu/ops/combine.h"
#include "cpu/ops/kept_zero_padding.h"
#include "cpu/ops/vec_math.h"
#include "moe/backend.h"

namespace moe::cpu {

void dispatch_gather_direct(void* x_rows, const void* x, Dtype dt, const HostPlan& plan, int64_t H,
                            bool padding_kept) {
  const size_t row_bytes = size_t(H) * dtype_size(dt);
  auto* dst = static_cast<char*>(x_rows);
  auto* src = static_cast<const char*>(x);
  // The row buffer is A x H (tens of MiB at block sizes): it leaves the caches before the up
  // projection reads it, so its lines go out without being fetched first.
  const bool stream = size_t(plan.rows) * row_bytes >= kStreamRowsBytes && streams_lines(dst, row_bytes);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < plan.rows; ++r) {
      // Rows copy tokens from anywhere in x: fetch the one kRowsAhead rows on now.
      if (r + kRowsAhead < plan.rows && plan.row_token(r + kRowsAhead) >= 0)
        prefetch_bytes(src + size_t(plan.row_token(r + kRowsAhead)) * row_bytes, row_bytes);
      const int32_t t = plan.row_token(r);
      if (t < 0 && padding_kept) continue;
      char* row = dst + size_t(r) * row_bytes;
      if (stream)
        t < 0 ? stream_zero(row, row_bytes) : stream_copy(row, src + size_t(t) * row_bytes, row_bytes);
      else if (t < 0)
        std::memset(row, 0, row_bytes);
      else
        std::memcpy(row, src + size_t(t) * row_bytes, row_bytes);
    }
    if (stream) end_streams();
  }
}

void dispatch_gather_repeat(void* x_rows, void* x_rep, const void* x, Dtype dt, const HostPlan& plan,
                            int64_t H, bool padding_kept) {
  const size_t row_bytes = size_t(H) * dtype_size(dt);
  const int64_t A = plan.tokens * plan.topk;
  auto* rep = static_cast<char*>(x_rep);
  auto* src = static_cast<const char*>(x);
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < A; ++a)
    std::memcpy(rep + size_t(a) * row_bytes, src + size_t(a / plan.topk) * row_bytes, row_bytes);
  auto* dst = static_cast<char*>(x_rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < plan.rows; ++r) {
    int32_t a = plan.row_assignment[r];
    if (a < 0 && padding_kept) continue;
    if (a < 0)
      std::memset(dst + size_t(r) * row_bytes, 0, row_bytes);
    else
      std::memcpy(dst + size_t(r) * row_bytes, rep + size_t(a) * row_bytes, row_bytes);
  }
}

DispatchBackwardKind dispatch_backward_kind(const MoeConfig& cfg) {
  const bool gather = cfg.permute_mode == PermuteMode::repeat_sort && cfg.use_custom_sort_vjp;
  return gather ? DispatchBackwardKind::gather : DispatchBackwardKind::scatter;
}

void dispatch_backward(const TokenSums& dx, const void* dx_rows, Dtype dt, const HostPlan& plan, int64_t H,
                       DispatchBackwardKind kind) {
  // Both are the combine's algorithms with unit weights.
  switch (kind) {
    case DispatchBackwardKind::scatter:
      add_rows_to_tokens(dx, dx_rows, dt, plan, H, nullptr);
      return;
    case DispatchBackwardKind::gather:
      gather_rows_to_tokens(dx, dx_rows, dt, plan, H, nullptr);
      return;
  }
}

namespace {

class CpuDispatch final : public DispatchOp {
 public:
  explicit CpuDispatch(const OpContext& ctx)
      : permute_(ctx.cfg.permute_mode),
        backward_kind_(dispatch_backward_kind(ctx.cfg)),
        padding_kept_(ctx.cfg.bench_pass == BenchPass::forward) {
    if (permute_ == PermuteMode::repeat_sort)
      x_rep_ = ctx.backend.empty(ctx.cfg.dtype, {ctx.cfg.assignments(), ctx.cfg.hidden});
  }

  void forward(Tensor& x_rows, const Tensor& x, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t H = x.dim(1);
    if (padding_kept_) padding_.zero_stale(x_rows, 0, size_t(H) * dtype_size(x.dtype()), p);
    switch (permute_) {
      case PermuteMode::direct_take:
        dispatch_gather_direct(x_rows.raw(), x.raw(), x.dtype(), p, H, padding_kept_);
        return;
      case PermuteMode::repeat_sort:
        dispatch_gather_repeat(x_rows.raw(), x_rep_.raw(), x.raw(), x.dtype(), p, H, padding_kept_);
        return;
    }
  }

  void backward(const TokenSums& dx, const Tensor& dx_rows, const DispatchPlan& plan) override {
    dispatch_backward(dx, dx_rows.raw(), dx_rows.dtype(), host_view(plan), dx.out.dim(1), backward_kind_);
  }

 private:
  PermuteMode permute_;
  DispatchBackwardKind backward_kind_;
  // A forward run: x_rows is written by this op alone, so its padding rows keep their zeros across calls.
  bool padding_kept_;
  KeptZeroPadding padding_;
  Tensor x_rep_;  // x_rep (A, H) repeat_sort scratch
};

}  // namespace

std::unique_ptr<DispatchOp> make_dispatch_op(const OpContext& ctx) {
  return std::make_unique<CpuDispatch>(ctx);
}

}  // namespace moe::cpu
