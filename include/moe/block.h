// The MoE block: the stage ops of one backend composed into the pipeline of docs/design.md,
//
//   forward:  pack -> dispatch -> expert_ffn.up -> expert_ffn.down -> [shared_expert] -> combine -> output
//   backward: loss' -> [shared_expert'] -> combine' -> expert_ffn' -> dispatch' -> dx
//
// with the Exchange's hooks (moe/exchange.h) where expert parallelism moves data. Every computation
// goes through the backend's op table; the block itself only orders calls and owns the buffers that
// pass between stages, all in the backend's memory and sized at construction for the worst routing
// of the config, so the timed calls allocate nothing. loss = mean(square(y)).
//
// Thread contract: one call at a time. On an asynchronous backend the calls only enqueue work:
// Backend::synchronize() before reading a clock, and copy to the host before reading values.
#pragma once

#include <memory>

#include "moe/backend.h"
#include "moe/comm.h"
#include "moe/config.h"
#include "moe/exchange.h"
#include "moe/inputs.h"
#include "moe/ops.h"
#include "moe/pack.h"
#include "moe/parallel.h"
#include "moe/routing.h"

namespace moe {

class MoeBlock {
 public:
  // REQUIRES: backend.supports_block(cfg) and exchange_supports(cfg, comm) are ok (asked before any
  // allocation by the caller; checked again here). backend and comm outlive the block. cfg is the
  // global problem; over several ranks (cfg.parallel_mode dp, ep) each rank's block computes its share
  // (layout(), moe/parallel.h).
  MoeBlock(const MoeConfig& cfg, Backend& backend, Comm& comm);

  // The inputs, routing and outputs below are in the backend's memory (Backend::to_device,
  // to_memory(routing, backend.memory()), make_grads(rank_config(cfg, layout()), backend)) and are this
  // rank's: make_rank_inputs, rank_routing; out and dx have layout().tokens rows, the routed weights
  // and their gradients layout().experts experts. On one rank, all of them.

  // out (T, H) run dtype. Packs and dispatches inside (the seed's `full` queue mode).
  Status forward(Tensor& out, const MoeInputs& in, const RoutingTensors& routing);

  // prequeue (spec §3.6): pack + dispatch once, then time only the expert MLP, combine and shared.
  Status prepare_dispatch(const MoeInputs& in, const RoutingTensors& routing);
  Status forward_prepared(Tensor& out, const MoeInputs& in, const RoutingTensors& routing);

  // Forward and the gradients of loss = mean(y^2) w.r.t. x, w1, w2, w3 and the shared weights. Fused
  // impls build w13 = [w1|w3] inside the call, as the seed's value_and_grad does, and compute dw1 and
  // dw3 as the halves of dw13 directly.
  Status forward_backward(Tensor& out, MoeGrads& grads, const MoeInputs& in, const RoutingTensors& routing);
  // The loss of the last forward_backward (a copy to the host): the mean over this rank's tokens.
  double loss() const;

  // Stages, for --stage-timing: each reads the previous stage's buffers. stage_combine writes out
  // (T, H) run dtype from zeros (the shared expert is in no stage), as a one-rank forward does.
  void stage_pack_dispatch(const MoeInputs& in, const RoutingTensors& routing);
  void stage_up(const MoeInputs& in);
  void stage_down(const MoeInputs& in);
  void stage_combine(Tensor& out, const RoutingTensors& routing);

  // The plan of the last call (a copy to the host).
  PlanStats plan_stats() const;
  // Bytes of activations a forward_backward keeps from its forward for its backward: dispatched rows,
  // what the expert FFN op keeps (none of its intermediates under expert_mlp remat), the shared
  // expert's intermediates, and the plan's index arrays. 0 for a forward-only pass. The combine keeps
  // nothing (its backward is a gather needing only the plan), so `combine` remat equals `none`.
  int64_t saved_activation_bytes() const;

  // Called around every stage (for --trace-dir); while set, the backend is synchronized around each.
  void set_stage_observer(StageTracer::Observer observer) { tracer_.set_observer(std::move(observer)); }

  // This rank's share of the block, and what its exchanges moved since reset_comm_meter().
  const RankLayout& layout() const { return exchange_->layout(); }
  const CommMeter& comm_meter() const { return exchange_->meter(); }
  void reset_comm_meter() { exchange_->reset_meter(); }

 private:
  // The weights each FFN op reads; fused impls get w13 only where the seed builds it outside the call.
  FfnWeights routed_weights(const MoeInputs& in, bool prebuilt_w13) const;
  FfnWeights shared_weights(const MoeInputs& in, bool prebuilt_w13) const;
  Status pack_and_dispatch(const MoeInputs& in, const RoutingTensors& routing);
  Status experts_and_combine(Tensor& out, const MoeInputs& in, const RoutingTensors& routing,
                             bool prebuilt_w13);
  // Runs an Exchange hook as a traced stage (--trace-dir shows each exchange).
  template <typename Fn>
  Status traced(const char* stage, Fn&& hook);
  // --ep-overlap in forward_backward: the expert FFN's backward in the forward's chunks.
  Status overlapped_expert_backward(FfnWeightGrads& grads, const MoeInputs& in);
  ExpertFfnOp& chunk_ffn(size_t c) const;  // the op chunk c's forward ran on

  MoeConfig cfg_;
  MoeConfig token_cfg_;   // the tokens and experts the rank's plan covers
  MoeConfig held_cfg_;    // the tokens (and experts) the rank holds: its shared expert's, its outputs'
  bool split_ = false;    // it gathers every token but holds a slice (Exchange::gathers_tokens)
  MoeConfig expert_cfg_;  // the experts it holds, sized for every row it can receive
  Backend& backend_;
  StageTracer tracer_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<PackOp> pack_;
  std::unique_ptr<DispatchOp> dispatch_;
  std::unique_ptr<ExpertFfnOp> expert_ffn_;
  // --ep-overlap N in forward_backward: the ops of chunks 1..N-1 (chunk 0 runs on expert_ffn_), a
  // chunk's routed weight gradients (run dtype) and their sum over the chunks (f32), each (E_l, H, M),
  // (E_l, H, M), (E_l, M, H); empty otherwise. chunk_rows_: each chunk's expert-side rows as the last
  // call's forward met them (the exchange's), for saved_activation_bytes.
  std::vector<std::unique_ptr<ExpertFfnOp>> chunk_ffns_;
  FfnWeightGrads chunk_grads_, chunk_grad_sum_;
  std::vector<const ExpertRows*> chunk_rows_;
  std::unique_ptr<CombineOp> combine_;
  std::unique_ptr<SharedExpertOp> shared_;  // null without a shared expert

  DispatchPlan plan_;
  Tensor x_rows_;   // x_rows  (max_rows, H) run dtype   dispatched tokens
  Tensor y_rows_;   // y_rows  (max_rows, H) run dtype   expert outputs
  Tensor out_acc_;  // out_acc (T, H) f32                shared expert + combine
  Tensor dy_;       // dy      (T_held, H) f32           loss gradient
  Tensor dy_rows_;  // dy_rows (max_rows, H) run dtype
  Tensor dx_rows_;  // dx_rows (max_rows, H) f32
  Tensor dx_acc_;   // dx_acc  (T, H) f32
  Tensor sum_sq_;   // (1) f64                           sum of y^2 of the last forward_backward
  // Where the token side is split (T tokens routed, T_held held):
  Tensor x_all_;     // x_all    (T, H) run dtype     every rank's x
  Tensor held_acc_;  // held_acc (T_held, H) f32      shared expert + this rank's slice of the sums
  Tensor dy_all_;    // dy_all   (T, H) f32           every rank's dy
  Tensor dx_held_;   // dx_held  (T_held, H) f32      shared expert's dx + this rank's slice of the sums
  ExpertRows ex_;    // the expert FFN's plan and rows: the ones above, or the exchange's received rows
};

}  // namespace moe
