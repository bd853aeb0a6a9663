// The MoE block on the CPU: route (given) -> pack -> dispatch -> expert_ffn -> combine -> + shared,
// forward and forward+backward (loss = mean(square(y))), for every impl/backend/dtype/remat/capacity
// combination of MoeConfig. Scratch buffers live in the block and are reused across calls, so the
// timed loop allocates nothing after the first iteration.
//
// Thread contract: one call at a time; kernels parallelise internally with OpenMP.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/pack.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {

class MoeBlock {
 public:
  MoeBlock(const MoeConfig& cfg, const KernelConfig& kcfg);

  // out (T, H) in cfg.dtype. Packs and dispatches inside (the seed's `full` queue mode).
  void forward(Tensor& out, const MoeInputs& in, const Routing& routing);

  // prequeue (spec §3.6): pack + dispatch once, then time only expert MLP + combine + shared.
  void prepare_dispatch(const MoeInputs& in, const Routing& routing);
  void forward_prepared(Tensor& out, const MoeInputs& in, const Routing& routing);

  // Forward, loss = mean(y^2), and the gradients of x, w1, w2, w3 and the shared weights. Fused impls
  // build w13 = [w1|w3] inside the call and split dw13 back, as the seed's value_and_grad does.
  double forward_backward(Tensor& out, MoeGrads& grads, const MoeInputs& in, const Routing& routing);

  // Stages, for --stage-timing: each reads the previous stage's buffers. stage_combine starts from
  // zeros unless `onto_shared` (then it adds onto the shared expert's output).
  void stage_pack(const Routing& routing);
  void stage_dispatch(const MoeInputs& in);
  void stage_up(const MoeInputs& in, bool fused_w13_from_inputs);
  void stage_down(const MoeInputs& in);
  void stage_combine(const Routing& routing, bool onto_shared = false);

  // Bytes of activations a forward_backward keeps from its forward for its backward: dispatched rows,
  // the up projection and the SwiGLU output unless expert_mlp remat recomputes them, the shared
  // expert's intermediates, and the plan's index arrays. 0 for a forward-only pass. The combine keeps
  // nothing (its backward is a gather needing only the plan), so `combine` remat equals `none`.
  int64_t saved_activation_bytes() const;
  const DispatchPlan& plan() const { return plan_; }

  // Called around every stage of forward / forward_backward (for --trace-dir); empty = no overhead
  // beyond one branch per stage.
  using StageObserver = std::function<void(const char* stage, std::chrono::steady_clock::time_point start,
                                           std::chrono::steady_clock::time_point end)>;
  void set_stage_observer(StageObserver observer) { observer_ = std::move(observer); }

 private:
  void ensure_row_buffers();
  void shared_forward(const MoeInputs& in, const Tensor& sw13);
  void shared_backward(MoeGrads& grads, const MoeInputs& in, const Tensor& sw13, const float* dy);
  void routed_backward(MoeGrads& grads, const MoeInputs& in, const Routing& routing, const Tensor& w13);
  void finish_output(Tensor& out);
  template <typename Fn>
  void traced(const char* stage, Fn&& fn);

  MoeConfig cfg_;
  ImplTraits traits_;
  int64_t tile_rows_;

  Packed packed_;
  DispatchPlan plan_;

  // Row buffers (rows = plan_.rows, grown on demand), run dtype unless noted.
  Tensor xs_;       // xs    (rows, H)   dispatched tokens
  Tensor x_rep_;    // x_rep (A, H)      repeat_sort scratch
  Tensor h_;        // h     (rows, 2M)  [gate | up]; non-fused impls fill the two halves by separate GEMMs
  Tensor g_;        // g     (rows, M)   SwiGLU output (pre-weighted for preweight impls)
  Tensor ys_;       // ys    (rows, H)   expert outputs
  Tensor out_acc_;  // (T, H) f32     combine + shared accumulator

  // Shared expert (f32 activations, spec §2.5).
  Tensor hs_;  // hs (T, 2S) f32
  Tensor gs_;  // gs (T, S)  f32

  // Backward scratch.
  Tensor dy_;      // dy    (T, H) f32
  Tensor dx_acc_;  // dx   (T, H) f32
  Tensor dys_;     // dys   (rows, H)
  Tensor dg_;      // dg    (rows, M)
  Tensor dh_;      // dh    (rows, 2M)
  Tensor dxs_;     // dxs   (rows, H) f32
  Tensor dxs2_;    // dxs2  (rows, H) f32  second data-gradient GEMM of non-fused impls
  Tensor w13_work_, sw13_work_, dw13_, dsw13_;
  Tensor dhs_, ds_, tmp_th_;  // shared backward scratch

  StageObserver observer_;
};

}  // namespace moe
