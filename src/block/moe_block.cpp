#include "cpu/combine.h"
#include "cpu/dispatch.h"
#include "cpu/swiglu.h"
#include "cpu/vec_math.h"
#include "moe/block.h"
#include "moe/gemm.h"

namespace moe {
namespace {

// Grows `t` to at least `numel` elements of `dtype` (as a flat buffer); never shrinks, so the timed
// loop allocates only in its first iteration.
void ensure(Tensor& t, Dtype dtype, int64_t numel) {
  if (t.numel() < numel || t.dtype() != dtype) t = Tensor(dtype, {std::max<int64_t>(numel, 1)});
}

char* row_ptr(Tensor& t, int64_t row, int64_t width) {
  return static_cast<char*>(t.raw()) + size_t(row * width) * dtype_size(t.dtype());
}

void add_into(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

template <typename Fn>
void MoeBlock::traced(const char* stage, Fn&& fn) {
  if (!observer_) return fn();
  const auto start = std::chrono::steady_clock::now();
  fn();
  observer_(stage, start, std::chrono::steady_clock::now());
}

MoeBlock::MoeBlock(const MoeConfig& cfg, const KernelConfig& kcfg)
    : cfg_(cfg),
      traits_(impl_traits(cfg.impl)),
      tile_rows_(layout_tile_rows(cfg.backend, kcfg.gmm_tile_rows)) {}

void MoeBlock::ensure_row_buffers() {
  const int64_t rows = plan_.rows, H = cfg_.hidden, M = cfg_.mlp_dim;
  ensure(xs_, cfg_.dtype, rows * H);
  ensure(h_, cfg_.dtype, rows * 2 * M);
  ensure(g_, cfg_.dtype, rows * M);
  ensure(ys_, cfg_.dtype, rows * H);
}

void MoeBlock::stage_pack(const Routing& routing) {
  pack_assignments(packed_, routing, cfg_.pack_strategy);
  build_dispatch_plan(plan_, packed_, routing, cfg_, tile_rows_);
  ensure_row_buffers();
}

void MoeBlock::stage_dispatch(const MoeInputs& in) {
  if (cfg_.permute_mode == PermuteMode::direct_take) {
    cpu::dispatch_gather_direct(xs_.raw(), in.x.raw(), cfg_.dtype, plan_, cfg_.hidden);
  } else {
    ensure(x_rep_, cfg_.dtype, cfg_.assignments() * cfg_.hidden);
    cpu::dispatch_gather_repeat(xs_.raw(), x_rep_.raw(), in.x.raw(), cfg_.dtype, plan_, cfg_.hidden);
  }
}

// Non-fused impls keep gate and up as two (rows, M) planes of h_; fused ones as one (rows, 2M) buffer.
void MoeBlock::stage_up(const MoeInputs& in, bool fused_w13_from_inputs) {
  const int64_t rows = plan_.rows, H = cfg_.hidden, M = cfg_.mlp_dim;
  const Dtype dt = cfg_.dtype;
  GroupedShape groups{plan_.group_offset.data(), cfg_.experts};
  cpu::GateUp gu;
  if (traits_.fuse_w13) {
    const Tensor& w13 = fused_w13_from_inputs ? in.w13 : w13_work_;
    grouped_gemm_nn(h_.raw(), dt, xs_.raw(), w13.raw(), dt, groups, H, 2 * M);
    gu = {h_.raw(), row_ptr(h_, 0, 1) + size_t(M) * dtype_size(dt), 2 * M};
  } else {
    char* up_plane = row_ptr(h_, rows, M);
    grouped_gemm_nn(h_.raw(), dt, xs_.raw(), in.w1.raw(), dt, groups, H, M);
    grouped_gemm_nn(up_plane, dt, xs_.raw(), in.w3.raw(), dt, groups, H, M);
    gu = {h_.raw(), up_plane, M};
  }
  cpu::swiglu_forward(g_.raw(), gu, dt, rows, M, traits_.preweight ? plan_.row_weight.data() : nullptr);
}

void MoeBlock::stage_down(const MoeInputs& in) {
  GroupedShape groups{plan_.group_offset.data(), cfg_.experts};
  grouped_gemm_nn(ys_.raw(), cfg_.dtype, g_.raw(), in.w2.raw(), cfg_.dtype, groups, cfg_.mlp_dim,
                  cfg_.hidden);
}

void MoeBlock::stage_combine(const Routing& routing, bool onto_shared) {
  ensure(out_acc_, Dtype::f32, cfg_.tokens * cfg_.hidden);
  if (!onto_shared) out_acc_.fill_zero();
  auto kind = cfg_.uses_scatter_combine() ? cpu::CombineKind::scatter : cpu::CombineKind::unsort;
  cpu::combine_forward(out_acc_.data<float>(), ys_.raw(), cfg_.dtype, plan_, routing, cfg_.hidden, kind,
                       traits_.preweight);
}

// Writes x @ sw13 -> silu*up -> @ sw2 into out_acc_ (which the combine then adds to).
void MoeBlock::shared_forward(const MoeInputs& in, const Tensor& sw13) {
  const int64_t T = cfg_.tokens, H = cfg_.hidden, S = cfg_.shared_expert_dim;
  const Dtype dt = cfg_.dtype;
  ensure(hs_, Dtype::f32, T * 2 * S);
  ensure(gs_, Dtype::f32, T * S);
  ensure(out_acc_, Dtype::f32, T * H);
  cpu::GateUp gu;
  if (cfg_.shared_fused) {
    dense_gemm(hs_.raw(), Dtype::f32, in.x.raw(), dt, sw13.raw(), dt, T, H, 2 * S);
    gu = {hs_.raw(), hs_.data<float>() + S, 2 * S};
  } else {
    float* up_plane = hs_.data<float>() + T * S;
    dense_gemm(hs_.raw(), Dtype::f32, in.x.raw(), dt, in.sw1.raw(), dt, T, H, S);
    dense_gemm(up_plane, Dtype::f32, in.x.raw(), dt, in.sw3.raw(), dt, T, H, S);
    gu = {hs_.raw(), up_plane, S};
  }
  cpu::swiglu_forward(gs_.raw(), gu, Dtype::f32, T, S, nullptr);
  dense_gemm(out_acc_.raw(), Dtype::f32, gs_.raw(), Dtype::f32, in.sw2.raw(), dt, T, S, H);
}

void MoeBlock::finish_output(Tensor& out) {
  MOE_CHECK(out.numel() == cfg_.tokens * cfg_.hidden && out.dtype() == cfg_.dtype, "output tensor mismatch");
  cpu::store_row(out.raw(), cfg_.dtype, out_acc_.data<float>(), out.numel());
}

void MoeBlock::forward(Tensor& out, const MoeInputs& in, const Routing& routing) {
  traced("pack", [&] { stage_pack(routing); });
  traced("dispatch", [&] { stage_dispatch(in); });
  forward_prepared(out, in, routing);
}

void MoeBlock::prepare_dispatch(const MoeInputs& in, const Routing& routing) {
  traced("pack", [&] { stage_pack(routing); });
  traced("dispatch", [&] { stage_dispatch(in); });
}

void MoeBlock::forward_prepared(Tensor& out, const MoeInputs& in, const Routing& routing) {
  traced("up", [&] { stage_up(in, /*fused_w13_from_inputs=*/true); });
  traced("down", [&] { stage_down(in); });
  if (cfg_.has_shared()) traced("shared", [&] { shared_forward(in, in.sw13); });
  traced("combine", [&] { stage_combine(routing, cfg_.has_shared()); });
  traced("output", [&] { finish_output(out); });
}

double MoeBlock::forward_backward(Tensor& out, MoeGrads& grads, const MoeInputs& in, const Routing& routing) {
  const int64_t T = cfg_.tokens, H = cfg_.hidden;
  // The seed builds w13 = concat(w1, w3) inside the differentiated function; so do we.
  if (traits_.fuse_w13) {
    if (w13_work_.shape() != in.w13.shape()) w13_work_ = Tensor(cfg_.dtype, in.w13.shape());
    traced("concat_w13", [&] { concat_last_dim(w13_work_, in.w1, in.w3); });
  }
  if (cfg_.has_shared() && cfg_.shared_fused) {
    if (sw13_work_.shape() != in.sw13.shape()) sw13_work_ = Tensor(cfg_.dtype, in.sw13.shape());
    traced("concat_shared_w13", [&] { concat_last_dim(sw13_work_, in.sw1, in.sw3); });
  }

  traced("pack", [&] { stage_pack(routing); });
  traced("dispatch", [&] { stage_dispatch(in); });
  // expert_mlp remat: the forward writes its up projection and SwiGLU output into the backward's
  // gradient scratch, which the backward overwrites; it must recompute them (routed_backward).
  const bool remat = cfg_.remat_mode == RematMode::expert_mlp;
  if (remat) {
    ensure(dh_, cfg_.dtype, h_.numel());
    ensure(dg_, cfg_.dtype, g_.numel());
    std::swap(h_, dh_);
    std::swap(g_, dg_);
  }
  traced("up", [&] { stage_up(in, /*fused_w13_from_inputs=*/false); });
  traced("down", [&] { stage_down(in); });
  if (remat) {
    std::swap(h_, dh_);
    std::swap(g_, dg_);
  }
  if (cfg_.has_shared()) traced("shared", [&] { shared_forward(in, sw13_work_); });
  traced("combine", [&] { stage_combine(routing, cfg_.has_shared()); });
  traced("output", [&] { finish_output(out); });

  // loss = mean(y^2) over the stored (run-dtype) output; dy = 2 y / (T H).
  ensure(dy_, Dtype::f32, T * H);
  float* dy = dy_.data<float>();
  const float scale = float(2.0 / double(T * H));
  double sum_sq = 0;
  if (cfg_.dtype == Dtype::f32) {
    const float* y = out.data<float>();
#pragma omp parallel for simd reduction(+ : sum_sq) schedule(static)
    for (int64_t i = 0; i < T * H; ++i) {
      sum_sq += double(y[i]) * y[i];
      dy[i] = scale * y[i];
    }
  } else {
    const bf16_t* y = out.data<bf16_t>();
#pragma omp parallel for reduction(+ : sum_sq) schedule(static)
    for (int64_t i = 0; i < T * H; ++i) {
      float v = bf16_to_f32(y[i]);
      sum_sq += double(v) * v;
      dy[i] = scale * v;
    }
  }

  ensure(dx_acc_, Dtype::f32, T * H);
  if (cfg_.has_shared())
    traced("shared_backward", [&] { shared_backward(grads, in, sw13_work_, dy); });
  else
    dx_acc_.fill_zero();
  routed_backward(grads, in, routing, w13_work_);
  cpu::store_row(grads.dx.raw(), cfg_.dtype, dx_acc_.data<float>(), T * H);
  return sum_sq / double(T * H);
}

void MoeBlock::routed_backward(MoeGrads& grads, const MoeInputs& in, const Routing& routing,
                               const Tensor& w13) {
  const int64_t rows = plan_.rows, H = cfg_.hidden, M = cfg_.mlp_dim;
  const Dtype dt = cfg_.dtype;
  GroupedShape groups{plan_.group_offset.data(), cfg_.experts};
  const float* row_weight = traits_.preweight ? plan_.row_weight.data() : nullptr;

  ensure(dys_, dt, rows * H);
  ensure(dg_, dt, rows * M);
  ensure(dh_, dt, rows * 2 * M);
  ensure(dxs_, Dtype::f32, rows * H);

  auto kind = cfg_.uses_scatter_combine() ? cpu::CombineKind::scatter : cpu::CombineKind::unsort;
  traced("combine_backward", [&] {
    cpu::combine_backward(dys_.raw(), dt, dy_.data<float>(), plan_, routing, H, kind, traits_.preweight);
  });

  // expert_mlp remat: the forward's up projection and SwiGLU output were not kept; recompute them
  // from the saved dispatched rows.
  if (cfg_.remat_mode == RematMode::expert_mlp)
    traced("remat_up", [&] { stage_up(in, /*fused_w13_from_inputs=*/false); });

  traced("down_backward", [&] {
    grouped_gemm_tn(grads.dw2.raw(), dt, g_.raw(), dys_.raw(), dt, groups, M, H);
    grouped_gemm_nt(dg_.raw(), dt, dys_.raw(), in.w2.raw(), dt, groups, M, H);
  });

  const bool fused = traits_.fuse_w13;
  cpu::GateUp gu = fused ? cpu::GateUp{h_.raw(), row_ptr(h_, 0, 1) + size_t(M) * dtype_size(dt), 2 * M}
                         : cpu::GateUp{h_.raw(), row_ptr(h_, rows, M), M};
  cpu::GateUpGrad dgu =
      fused ? cpu::GateUpGrad{dh_.raw(), row_ptr(dh_, 0, 1) + size_t(M) * dtype_size(dt), 2 * M}
            : cpu::GateUpGrad{dh_.raw(), row_ptr(dh_, rows, M), M};
  traced("swiglu_backward", [&] { cpu::swiglu_backward(dgu, dg_.raw(), gu, dt, rows, M, row_weight); });
  traced("up_backward", [&] {
    if (fused) {
      if (dw13_.shape() != w13.shape()) dw13_ = Tensor(dt, w13.shape());
      grouped_gemm_tn(dw13_.raw(), dt, xs_.raw(), dh_.raw(), dt, groups, H, 2 * M);
      split_last_dim(grads.dw1, grads.dw3, dw13_);
      grouped_gemm_nt(dxs_.raw(), Dtype::f32, dh_.raw(), w13.raw(), dt, groups, H, 2 * M);
    } else {
      grouped_gemm_tn(grads.dw1.raw(), dt, xs_.raw(), dgu.da, dt, groups, H, M);
      grouped_gemm_tn(grads.dw3.raw(), dt, xs_.raw(), dgu.db, dt, groups, H, M);
      ensure(dxs2_, Dtype::f32, rows * H);
      grouped_gemm_nt(dxs_.raw(), Dtype::f32, dgu.da, in.w1.raw(), dt, groups, H, M);
      grouped_gemm_nt(dxs2_.raw(), Dtype::f32, dgu.db, in.w3.raw(), dt, groups, H, M);
      add_into(dxs_.data<float>(), dxs2_.data<float>(), rows * H);
    }
  });
  const bool gather = cfg_.permute_mode == PermuteMode::repeat_sort && cfg_.use_custom_sort_vjp;
  traced("dispatch_backward", [&] {
    cpu::dispatch_backward(dx_acc_.data<float>(), dxs_.raw(), Dtype::f32, plan_, H,
                           gather ? cpu::DispatchBackwardKind::gather : cpu::DispatchBackwardKind::scatter);
  });
}

// Shared expert backward; writes dx_acc_ (initialising it) and the shared weight gradients.
void MoeBlock::shared_backward(MoeGrads& grads, const MoeInputs& in, const Tensor& sw13, const float* dy) {
  const int64_t T = cfg_.tokens, H = cfg_.hidden, S = cfg_.shared_expert_dim;
  const Dtype dt = cfg_.dtype;
  ensure(ds_, Dtype::f32, T * S);
  ensure(dhs_, Dtype::f32, T * 2 * S);
  // ds (T, S) = dy (T, H) @ sw2^T;  dsw2 (S, H) = gs^T @ dy
  dense_gemm(ds_.raw(), Dtype::f32, dy, Dtype::f32, in.sw2.raw(), dt, T, H, S, false, true);
  dense_gemm(grads.dsw2.raw(), dt, gs_.raw(), Dtype::f32, dy, Dtype::f32, S, T, H, true, false);
  if (cfg_.shared_fused) {
    cpu::GateUp gu{hs_.raw(), hs_.data<float>() + S, 2 * S};
    cpu::GateUpGrad dgu{dhs_.raw(), dhs_.data<float>() + S, 2 * S};
    cpu::swiglu_backward(dgu, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
    if (dsw13_.shape() != sw13.shape()) dsw13_ = Tensor(dt, sw13.shape());
    dense_gemm(dsw13_.raw(), dt, in.x.raw(), dt, dhs_.raw(), Dtype::f32, H, T, 2 * S, true, false);
    split_last_dim(grads.dsw1, grads.dsw3, dsw13_);
    dense_gemm(dx_acc_.raw(), Dtype::f32, dhs_.raw(), Dtype::f32, sw13.raw(), dt, T, 2 * S, H, false, true);
  } else {
    float* dup = dhs_.data<float>() + T * S;
    cpu::GateUp gu{hs_.raw(), hs_.data<float>() + T * S, S};
    cpu::GateUpGrad dgu{dhs_.raw(), dup, S};
    cpu::swiglu_backward(dgu, ds_.raw(), gu, Dtype::f32, T, S, nullptr);
    dense_gemm(grads.dsw1.raw(), dt, in.x.raw(), dt, dhs_.raw(), Dtype::f32, H, T, S, true, false);
    dense_gemm(grads.dsw3.raw(), dt, in.x.raw(), dt, dup, Dtype::f32, H, T, S, true, false);
    ensure(tmp_th_, Dtype::f32, T * H);
    dense_gemm(dx_acc_.raw(), Dtype::f32, dhs_.raw(), Dtype::f32, in.sw1.raw(), dt, T, S, H, false, true);
    dense_gemm(tmp_th_.raw(), Dtype::f32, dup, Dtype::f32, in.sw3.raw(), dt, T, S, H, false, true);
    add_into(dx_acc_.data<float>(), tmp_th_.data<float>(), T * H);
  }
}

int64_t MoeBlock::saved_activation_bytes() const {
  const int64_t rows = plan_.rows, T = cfg_.tokens, H = cfg_.hidden, M = cfg_.mlp_dim,
                S = cfg_.shared_expert_dim;
  const int64_t es = int64_t(dtype_size(cfg_.dtype));
  if (cfg_.bench_pass == BenchPass::forward) return 0;  // nothing is kept for a backward
  int64_t bytes = rows * H * es;                        // dispatched rows: the expert MLP's input
  if (cfg_.remat_mode != RematMode::expert_mlp) bytes += rows * 3 * M * es;  // h (rows, 2M) + g (rows, M)
  if (cfg_.has_shared()) bytes += T * 3 * S * 4;                             // hs (T, 2S) + gs (T, S), f32
  bytes += int64_t(plan_.row_assignment.size() + plan_.assignment_row.size()) * 4 +
           int64_t(plan_.row_weight.size()) * 4 + int64_t(plan_.group_offset.size()) * 8;
  return bytes;
}

}  // namespace moe
