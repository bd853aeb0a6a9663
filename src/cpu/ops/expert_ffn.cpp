#include "cpu/ops/expert_ffn.h"

#include "cpu/gemm/gemm.h"
#include "cpu/ops/kept_zero_padding.h"
#include "cpu/ops/swiglu.h"
#include "moe/backend.h"

namespace moe::cpu {
namespace {

// Element offset -> byte pointer in a tensor's storage.
char* at(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}

class FloatExpertFfn final : public ExpertFfnOp {
 public:
  FloatExpertFfn(const OpContext& ctx, GemmKernels& gemm)
      : gemm_(gemm),
        tracer_(ctx.tracer),
        cfg_(ctx.cfg),
        dt_(ctx.cfg.dtype),
        traits_(impl_traits(ctx.cfg.impl)),
        remat_(ctx.cfg.recomputes_expert_mlp()),
        backward_reads_forward_h_(ctx.cfg.bench_pass == BenchPass::forward_backward && !remat_),
        forward_run_(ctx.cfg.bench_pass == BenchPass::forward),
        padding_kept_(forward_run_ || !remat_),
        H_(ctx.cfg.hidden),
        M_(ctx.cfg.mlp_dim),
        E_(ctx.cfg.experts),
        max_rows_(max_plan_rows(ctx.cfg, ctx.tile_rows)),
        act_(ctx, ctx.cfg.bench_pass == BenchPass::forward_backward) {}

  // expert_mlp remat: the forward writes its up projection and SwiGLU output into the backward's
  // gradient scratch, which the backward overwrites, so the backward must and does recompute them.
  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    Tensor& h = remat_ ? act_.dh : act_.h;
    Tensor& g = remat_ ? act_.dg : act_.g;
    if (padding_kept_) {
      const size_t es = dtype_size(dt_);
      if (traits_.fuse_w13) {
        h_padding_[0].zero_stale(h, 0, size_t(2 * M_) * es, p);
      } else {
        h_padding_[0].zero_stale(h, 0, size_t(M_) * es, p);
        h_padding_[1].zero_stale(h, size_t(p.rows * M_) * es, size_t(M_) * es, p);
      }
      g_padding_.zero_stale(g, 0, size_t(M_) * es, p);
    }
    compute_up(h, g, x_rows, w, p, backward_reads_forward_h_, padding_kept_);
  }

  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    if (padding_kept_) y_padding_.zero_stale(y_rows, 0, size_t(H_) * dtype_size(dt_), p);
    gemm_.nn(y_rows.raw(), dt_, (remat_ ? act_.dg : act_.g).raw(), kept(w.w2, down_packs_), dt_,
             {p.group_offset, E_, p.group_live, /*zero_padding=*/true, padding_kept_}, M_, H_);
  }

  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t rows = p.rows, H = H_, M = M_;
    const GroupedShape groups{p.group_offset, E_, p.group_live, /*zero_padding=*/true};
    if (remat_)
      tracer_("remat_up", [&] { compute_up(act_.h, act_.g, x_rows, w, p, /*keep_h=*/true, false); });

    const float* row_weight = traits_.preweight ? p.row_weight : nullptr;
    tracer_("down_backward", [&] {
      gemm_.tn(dw.dw2.raw(), dt_, act_.g.raw(), dy_rows.raw(), dt_, groups, M, H, H);
      // [gate | up] rows: SwiGLU's backward runs in the dgrad's epilogue (dg never goes to memory).
      if (traits_.fuse_w13)
        gemm_.nt_swiglu_grad(act_.dh.raw(), act_.dg.raw(), dy_rows.raw(), w.w2.raw(), act_.h.raw(), dt_,
                             groups, M, H, row_weight);
      else
        gemm_.nt(act_.dg.raw(), dt_, dy_rows.raw(), w.w2.raw(), dt_, groups, M, H);
    });
    const GateUpGrad dgu = gate_up_grad(act_.dh, rows);
    if (!traits_.fuse_w13)
      tracer_("swiglu_backward", [&] {
        swiglu_backward(dgu, dt_, act_.dg.raw(), gate_up(act_.h, rows), dt_, rows, M, row_weight);
      });
    tracer_("up_backward", [&] {
      // dw13 = x^T @ dh split in two is dw1 = x^T @ dh[:, :M] and dw3 = x^T @ dh[:, M:]: the halves are
      // computed in place, with no dw13 to write and copy apart (a full pass over the weights).
      gemm_.tn_pair(dw.dw1.raw(), dw.dw3.raw(), dt_, x_rows.raw(), dgu.da, dgu.db, dt_, groups, H, M, dgu.ld);
      if (traits_.fuse_w13) {
        gemm_.nt(dx_rows.raw(), Dtype::f32, act_.dh.raw(), w13_of(w), dt_, groups, H, 2 * M);
      } else {
        gemm_.nt(dx_rows.raw(), Dtype::f32, dgu.da, w.w1.raw(), dt_, groups, H, M);
        gemm_.nt(dx_rows.raw(), Dtype::f32, dgu.db, w.w3.raw(), dt_, groups, H, M,
                 /*accumulate=*/true);
      }
    });
  }

  int64_t saved_bytes(int64_t rows) const override { return expert_mlp_saved_bytes(cfg_, rows); }

 private:
  // Non-fused impls keep gate and up as two (rows, M) planes of h; fused ones as one (rows, 2M) row.
  GateUp gate_up(Tensor& h, int64_t rows) {
    if (traits_.fuse_w13) return {h.raw(), at(h, M_), 2 * M_};
    return {h.raw(), at(h, rows * M_), M_};
  }
  GateUpGrad gate_up_grad(Tensor& dh, int64_t rows) {
    if (traits_.fuse_w13) return {dh.raw(), at(dh, M_), 2 * M_};
    return {dh.raw(), at(dh, rows * M_), M_};
  }

  // The seed builds w13 = concat(w1, w3) inside the differentiated call (forward_backward), and passes
  // it prebuilt in forward runs. Without a w13 the GEMMs read [w1 | w3] where the two lie (ExpertWeights):
  // the same products, with no concatenated copy of the weights to write and read back (a full pass
  // over them, ~8 % of a forward_backward at 137 rows per expert).
  static ExpertWeights w13_of(const FfnWeights& w) {
    return w.w13.empty() ? ExpertWeights(w.w1.raw(), w.w3.raw()) : ExpertWeights(w.w13.raw());
  }
  // A forward run's weights hold their values across calls (an inference step's), so its GEMMs may keep a
  // packing of them (gemv's tile order); a forward_backward's change every step in training, so its GEMMs
  // read them as they are in every call.
  ExpertWeights kept(const Tensor& t, KeptWeightPacks& slot) {
    return forward_run_ ? ExpertWeights(t.raw()).kept(slot.of(t)) : ExpertWeights(t.raw());
  }
  ExpertWeights kept_w13(const FfnWeights& w) {
    if (!forward_run_) return w13_of(w);
    return w13_of(w).kept(w.w13.empty() ? up_packs_[0].of(w.w1, w.w3) : up_packs_[0].of(w.w13));
  }
  // keep_h: a backward will read h (else the fused GEMM may skip storing it: SwiGLU happens in its
  // epilogue, so h is never read back). padding_kept: h's and g's padding rows already hold zeros.
  void compute_up(Tensor& h, Tensor& g, const Tensor& x_rows, const FfnWeights& w, const HostPlan& p,
                  bool keep_h, bool padding_kept) {
    const GroupedShape groups{p.group_offset, E_, p.group_live, /*zero_padding=*/true, padding_kept};
    const float* row_weight = traits_.preweight ? p.row_weight : nullptr;
    if (traits_.fuse_w13) {
      gemm_.nn_swiglu(h.raw(), g.raw(), dt_, x_rows.raw(), kept_w13(w), dt_, groups, H_, M_, row_weight,
                      keep_h);
      return;
    }
    gemm_.nn(h.raw(), dt_, x_rows.raw(), kept(w.w1, up_packs_[0]), dt_, groups, H_, M_);
    gemm_.nn(at(h, p.rows * M_), dt_, x_rows.raw(), kept(w.w3, up_packs_[1]), dt_, groups, H_, M_);
    swiglu_forward_groups(g.raw(), dt_, gate_up(h, p.rows), dt_, groups, M_, row_weight);
  }

  GemmKernels& gemm_;  // the cpu backend's kernel table for this op's KernelConfig
  const StageTracer& tracer_;
  const MoeConfig& cfg_;  // the block's, alive while the op is
  Dtype dt_;
  ImplTraits traits_;
  bool remat_;
  bool backward_reads_forward_h_;
  // A forward run: the weights hold their values across calls, so their packings are kept.
  bool forward_run_;
  // h's, g's and y's padding rows keep their zeros across calls: only up and down write them, but where the
  // backward recomputes the up projection into its gradient scratch (expert_mlp remat), which it overwrites.
  // forward_backward's few-token forward rewrote them every call: Qwen3-30B-A3B at 8 tokens on the Zen 3, up
  // 17.9-19.0 -> 15.0 ms, down 6.6-7.1 -> 5.7 (a forward run on the same weights read in place: 10.1-11.5 and
  // 5.0-5.8); the whole call 75.6-75.8 -> 78.6-78.7 % of the bandwidth peak, OLMoE's 75.4-76.4 -> 78.5-79.0.
  bool padding_kept_;
  int64_t H_, M_, E_, max_rows_;
  KeptWeightPacks up_packs_[2], down_packs_;              // [w13 or w1, w3], w2
  KeptZeroPadding h_padding_[2], g_padding_, y_padding_;  // h: fused rows, or gate and up planes
  // h: [gate | up] rows, or gate and up planes of (rows, M); g pre-weighted for preweight impls.
  ExpertActivations act_;
};

}  // namespace

std::unique_ptr<ExpertFfnOp> make_float_expert_ffn(const OpContext& ctx, GemmKernels& gemm) {
  return std::make_unique<FloatExpertFfn>(ctx, gemm);
}

}  // namespace moe::cpu
