#include "cpu/ops/expert_ffn_int8.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "cpu/ops/swiglu.h"
#include "cpu/ops/transpose_s8.h"
#include "moe/backend.h"
#include "moe/quantize.h"

namespace moe::cpu {
namespace {

char* at(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}

// Quantized values and their scales: rows quantized per row, q (rows, width) and scale (rows), or a
// routed weight quantized inside the call (int8_routed, int8_all), q (E, Kd, N) or its transpose and
// scale (E).
struct Quantized {
  Tensor q, scale;
  Quantized() = default;
  Quantized(Backend& be, std::vector<int64_t> shape, int64_t scales)
      : q(be.empty(Dtype::s8, std::move(shape))), scale(be.empty(Dtype::f32, {scales})) {}
};

// Forward (per group of the plan's rows; fused impls shown, others use w1 and w3 apart):
//   xq = quant_rows(x_rows);  h = nn_s8(xq, quant_expert(w13))  [run dtype]
//   g = SwiGLU(h) (* weight), gq = quant_rows(g)  [h, g and gq from one nn_s8_swiglu];
//   y = nn_s8(gq, quant_expert(w2))
// Backward (the seed's rule for prequant, our straight-through estimator for the others: the same int8
// data-gradient GEMMs with the forward's quantized weights transposed, float weight gradients):
//   dW2 = g^T dy;  dg = nn_s8(quant_rows(dy), w2q^T);  dh = SwiGLU'(dg, h)
//   dW13 = x^T dh; dx = nn_s8(quant_rows(dh), w13q^T)   [f32]
class Int8ExpertFfn final : public ExpertFfnOp {
 public:
  Int8ExpertFfn(const OpContext& ctx, Int8Kernels k)
      : k_(k),
        tracer_(ctx.tracer),
        cfg_(ctx.cfg),
        dt_(ctx.cfg.dtype),
        traits_(impl_traits(ctx.cfg.impl)),
        prequantized_(ctx.cfg.quant_mode == QuantMode::int8_routed_prequant),
        per_token_(ctx.cfg.parallel_mode != ParallelMode::ep),
        backward_(ctx.cfg.bench_pass == BenchPass::forward_backward),
        remat_(ctx.cfg.recomputes_expert_mlp()),
        H_(ctx.cfg.hidden),
        M_(ctx.cfg.mlp_dim),
        E_(ctx.cfg.experts),
        max_rows_(max_plan_rows(ctx.cfg, ctx.tile_rows)) {
    Backend& be = ctx.backend;
    const bool backward = ctx.cfg.bench_pass == BenchPass::forward_backward;
    h_ = be.empty(dt_, {max_rows_, 2 * M_});
    g_ = be.empty(dt_, {max_rows_, M_});
    xq_ = Quantized(be, {max_rows_, H_}, max_rows_);
    gq_ = Quantized(be, {max_rows_, M_}, max_rows_);
    if (backward) {
      dh_ = be.empty(dt_, {max_rows_, 2 * M_});
      dg_ = be.empty(dt_, {max_rows_, M_});
      dyq_ = Quantized(be, {max_rows_, H_}, max_rows_);
      // fused: (rows, 2M) with a scale per row; else two (rows, M) planes with a scale per row each
      dhq_ = Quantized(be, {max_rows_, 2 * M_}, 2 * max_rows_);
    }
    if (!prequantized_) {
      const int up_parts = traits_.fuse_w13 ? 1 : 2, up_cols = 2 * M_ / up_parts;
      for (int p = 0; p < up_parts; ++p) {
        up_q_[p] = Quantized(be, {E_, H_, up_cols}, E_);
        if (backward) up_qt_[p] = Quantized(be, {E_, up_cols, H_}, E_);
      }
      down_q_ = Quantized(be, {E_, M_, H_}, E_);
      if (backward) down_qt_ = Quantized(be, {E_, H_, M_}, E_);
    }
  }

  // up leaves g quantized for down (gq_). It keeps h where a backward reads it (under expert_mlp remat the
  // backward makes its own).
  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    compute_up(remat_ ? dh_ : h_, remat_ ? dg_ : g_, gq_, backward_ && !remat_, x_rows, w, host_view(plan));
  }

  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    k_.gemm.nn_s8(y_rows.raw(), dt_, operands(gq_, down_weight(w, /*transposed=*/false)), groups(p), M_, H_);
  }

  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights& w, const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t rows = p.rows, H = H_, M = M_;
    // (down ran: its input gq_ is free to take the recomputed g's quantized rows, which nothing reads.)
    if (remat_) tracer_("remat_up", [&] { compute_up(h_, g_, gq_, true, x_rows, w, p); });
    const float* row_weight = traits_.preweight ? p.row_weight : nullptr;
    const GroupedShape gs = groups(p);
    // The transposed weights first: on-the-fly modes quantize them in a stage of their own.
    const Weight w2t = down_weight(w, /*transposed=*/true);
    const Weight up_t[2] = {up_weight(w, 0, true), traits_.fuse_w13 ? Weight{} : up_weight(w, 1, true)};
    tracer_("down_backward", [&] {
      k_.gemm.tn(dw.dw2.raw(), dt_, g_.raw(), dy_rows.raw(), dt_, gs, M, H, H);
      quantize_rows(dyq_, dy_rows.raw(), rows, H, H);
      k_.gemm.nn_s8(dg_.raw(), dt_, operands(dyq_, w2t), gs, H, M);
    });
    const GateUpGrad dgu = traits_.fuse_w13 ? GateUpGrad{dh_.raw(), at(dh_, M), 2 * M}
                                            : GateUpGrad{dh_.raw(), at(dh_, rows * M), M};
    const GateUp gu{h_.raw(), at(h_, M), 2 * M};
    tracer_("swiglu_backward", [&] { swiglu_backward(dgu, dt_, dg_.raw(), gu, dt_, rows, M, row_weight); });
    tracer_("up_backward", [&] {
      k_.gemm.tn_pair(dw.dw1.raw(), dw.dw3.raw(), dt_, x_rows.raw(), dgu.da, dgu.db, dt_, gs, H, M, dgu.ld);
      if (traits_.fuse_w13) {
        quantize_rows(dhq_, dh_.raw(), rows, 2 * M, 2 * M);
        k_.gemm.nn_s8(dx_rows.raw(), Dtype::f32, operands(dhq_, up_t[0]), gs, 2 * M, H);
        return;
      }
      // Gate and up gradients are quantized per row apart, each against its own weight's scale.
      for (int part = 0; part < 2; ++part) {
        int8_t* q = dhq_.q.data<int8_t>() + part * rows * M;
        float* s = dhq_.scale.data<float>() + part * max_rows_;
        k_.quantize_rows(q, s, part ? dgu.db : dgu.da, dt_, rows, M, M, false);
        k_.gemm.nn_s8(dx_rows.raw(), Dtype::f32,
                      {q, s, up_t[part].q, up_t[part].scale, false, up_t[part].packs}, gs, M, H,
                      /*accumulate=*/part == 1);
      }
    });
  }

  int64_t saved_bytes(int64_t rows) const override { return expert_mlp_saved_bytes(cfg_, rows); }

 private:
  struct Weight {
    const int8_t* q = nullptr;
    const float* scale = nullptr;
    WeightPacks* packs = nullptr;  // prequant: the GEMMs' packings of q, kept across calls
  };
  static GroupedShape groups(const HostPlan& p) { return {p.group_offset, p.experts, p.group_live, true}; }
  static Int8Operands operands(const Quantized& rows, Weight w) {
    return {rows.q.data<int8_t>(), rows.scale.data<float>(), w.q, w.scale, false, w.packs};
  }
  // int8_routed_prequant's weights keep their values for the run (quantized once, in make_inputs), so the
  // GEMM kernels pack them once (the first, untimed call) and keep the packing in a slot per weight and
  // direction.
  void quantize_rows(Quantized& out, const void* x, int64_t rows, int64_t width, int64_t ld) {
    k_.quantize_rows(out.q.data<int8_t>(), out.scale.data<float>(), x, dt_, rows, width, ld, false);
  }
  static Weight view(const QuantizedWeight& q, bool transposed, KeptWeightPacks& slot) {
    MOE_CHECK(!q.empty(),
              "int8_routed_prequant: the inputs carry no quantized weights (make_inputs makes them)");
    const Tensor& values = transposed ? q.qt : q.q;
    return {values.data<int8_t>(), q.scale.data<float>(), slot.of(values)};
  }
  static Weight view(Quantized& q) { return {q.q.data<int8_t>(), q.scale.data<float>()}; }

  // q's transpose from `forward` (this call's quantization of the same weights, Kd x N an expert), where
  // `fresh`: element-wise quantization with one scale an expert commutes with the transpose. Returns
  // whether it did (else the caller quantizes).
  bool transposed_from(Quantized& q, const Quantized& forward, bool& fresh, int64_t Kd, int64_t N) {
    if (!fresh) return false;
    tracer_("quantize_weights", [&] {
      transpose_s8(q.q.data<int8_t>(), forward.q.data<int8_t>(), E_, Kd, N);
      std::copy_n(forward.scale.data<float>(), E_, q.scale.data<float>());
    });
    fresh = false;  // a later backward (another call's) quantizes its weights again
    return true;
  }

  // The first projection's weights of part p (fused: one [w1 | w3] part; else w1 = 0, w3 = 1), quantized
  // once outside (prequant) or here: the forward's, or their transpose for the backward (the same
  // scale, since the same values: the forward's transposed where this call's forward quantized them).
  Weight up_weight(const FfnWeights& w, int p, bool transposed) {
    if (prequantized_)
      return view(traits_.fuse_w13 ? w.q13 : (p ? w.q3 : w.q1), transposed, up_packs_[p][transposed]);
    Quantized& q = transposed ? up_qt_[p] : up_q_[p];
    const int64_t cols = traits_.fuse_w13 ? 2 * M_ : M_;
    if (transposed && transposed_from(q, up_q_[p], up_fresh_[p], H_, cols)) return view(q);
    if (!transposed) up_fresh_[p] = backward_;
    tracer_("quantize_weights", [&] {
      const ExpertWeights src = !traits_.fuse_w13 ? ExpertWeights((p ? w.w3 : w.w1).raw())
                                : w.w13.empty()   ? ExpertWeights(w.w1.raw(), w.w3.raw())
                                                  : ExpertWeights(w.w13.raw());
      k_.quantize_experts(q.q.data<int8_t>(), q.scale.data<float>(), src, dt_, E_, H_, cols, transposed);
    });
    return view(q);
  }
  Weight down_weight(const FfnWeights& w, bool transposed) {
    if (prequantized_) return view(w.q2, transposed, down_packs_[transposed]);
    Quantized& q = transposed ? down_qt_ : down_q_;
    if (transposed && transposed_from(q, down_q_, down_fresh_, M_, H_)) return view(q);
    if (!transposed) down_fresh_ = backward_;
    tracer_("quantize_weights", [&] {
      k_.quantize_experts(q.q.data<int8_t>(), q.scale.data<float>(), w.w2.raw(), dt_, E_, M_, H_, transposed);
    });
    return view(q);
  }

  // h and g of the plan's rows, with g quantized per row into gq (down's input), in one GEMM whose epilogue
  // runs SwiGLU and the quantization while each row block is in the caches (nn_s8_swiglu). h = [gate | up]
  // rows for every impl; it is written where keep_h (a backward reads it).
  void compute_up(Tensor& h, Tensor& g, Quantized& gq, bool keep_h, const Tensor& x_rows, const FfnWeights& w,
                  const HostPlan& p) {
    tracer_("quantize_rows", [&] {
      if (per_token_) {
        k_.quantize_token_rows(xq_.q.data<int8_t>(), xq_.scale.data<float>(), x_rows.raw(), dt_, p.tokens,
                               p.topk, H_, p.assignment_row);
      } else {
        quantize_rows(xq_, x_rows.raw(), p.rows, H_, H_);
      }
    });
    const Weight gate = up_weight(w, 0, false);
    Int8UpPart up;
    if (!traits_.fuse_w13) {
      const Weight w3 = up_weight(w, 1, false);
      up = {w3.q, w3.scale};
    }
    const S8SwigluOut out{h.raw(), g.raw(), gq.q.data<int8_t>(), gq.scale.data<float>(), keep_h};
    k_.gemm.nn_s8_swiglu(out, dt_, operands(xq_, gate), up, groups(p), H_, M_,
                         traits_.preweight ? p.row_weight : nullptr);
  }

  Int8Kernels k_;
  const StageTracer& tracer_;
  const MoeConfig& cfg_;  // the block's, alive while the op is
  Dtype dt_;
  ImplTraits traits_;
  // x quantized once per token and copied to its rows, as the seed does outside EP (where the rows an
  // op holds came from other ranks and are quantized per row, as the seed's EP paths do).
  bool prequantized_, per_token_, backward_, remat_;
  int64_t H_, M_, E_, max_rows_;
  Tensor h_;   // h  (max_rows, 2M) run dtype  [gate | up] rows
  Tensor g_;   // g  (max_rows, M)  run dtype
  Tensor dh_;  // dh (max_rows, 2M) backward; the forward's h under expert_mlp remat
  Tensor dg_;  // dg (max_rows, M)  backward; the forward's g under expert_mlp remat
  Quantized xq_, gq_, dyq_, dhq_;
  Quantized up_q_[2], up_qt_[2], down_q_, down_qt_;  // int8_routed / int8_all only
  // Whether up_q_ and down_q_ hold this call's forward's quantization, which its backward transposes.
  bool up_fresh_[2] = {false, false}, down_fresh_ = false;
  KeptWeightPacks up_packs_[2][2], down_packs_[2];  // prequant: [part][transposed], [transposed]
};

}  // namespace

Int8Kernels cpu_int8_kernels(GemmKernels& gemm) {
  return {gemm, &cpu::quantize_rows, &cpu::quantize_experts, &cpu::quantize_columns,
          &cpu::quantize_token_rows};
}

std::unique_ptr<ExpertFfnOp> make_int8_expert_ffn(const OpContext& ctx, Int8Kernels kernels) {
  return std::make_unique<Int8ExpertFfn>(ctx, kernels);
}

}  // namespace moe::cpu
