// Where the block's data crosses ranks (docs/design.md, "Comm insertion points"). The block calls
// these hooks at fixed places of its forward and backward; what moves is decided by the parallel mode
// and EP comm path, one Exchange implementation each (src/comm/exchange_*.cpp), all of it through
// Comm collectives. The hooks run inside the timed call, in stream order on a device backend.
//
//   forward:  pack -> after_plan -> dispatch -> before_expert_ffn -> expert_ffn -> after_expert_ffn
//             -> combine (+ shared) -> after_combine
//   backward: combine' -> before_expert_ffn_backward -> expert_ffn' -> after_expert_ffn_backward
//             -> dispatch' (+ shared') -> reduce_input_grad, reduce_weight_grads
#pragma once

#include <memory>
#include <vector>

#include "moe/comm.h"
#include "moe/config.h"
#include "moe/pack.h"
#include "moe/status.h"

namespace moe {

class Exchange {
 public:
  virtual ~Exchange() = default;
  // After pack: the ranks learn how many rows each sends to each expert's owner.
  virtual Status after_plan(const DispatchPlan& plan) = 0;
  // Around expert_ffn: dispatched rows (max_rows, H) go to the ranks owning their experts, and their
  // outputs come back into y_rows.
  virtual Status before_expert_ffn(Tensor& x_rows, const DispatchPlan& plan) = 0;
  virtual Status after_expert_ffn(Tensor& y_rows, const DispatchPlan& plan) = 0;
  // After combine: out (T, H) f32 partial sums become the block's output. Called only where
  // sums_combined_output(); elsewhere the combine writes the output directly (TokenSums).
  virtual bool sums_combined_output() const = 0;
  virtual Status after_combine(Tensor& out) = 0;
  // Backward: row gradients travel like the rows, the other way round.
  virtual Status before_expert_ffn_backward(Tensor& dy_rows, const DispatchPlan& plan) = 0;
  virtual Status after_expert_ffn_backward(Tensor& dx_rows, const DispatchPlan& plan) = 0;
  // dx (T, H) f32 of a rank's tokens (called only where sums_input_grad()); the weight gradients (run
  // dtype) of the weights a rank holds.
  virtual bool sums_input_grad() const = 0;
  virtual Status reduce_input_grad(Tensor& dx) = 0;
  virtual Status reduce_weight_grads(const std::vector<Tensor*>& grads) = 0;
};

// Ok, or why cfg's parallel mode and comm path cannot run over `world` (asked before allocating).
Status exchange_supports(const MoeConfig& cfg, const Comm& world);
// REQUIRES: exchange_supports(cfg, world) is ok. `world` outlives the Exchange.
std::unique_ptr<Exchange> make_exchange(const MoeConfig& cfg, Comm& world);

}  // namespace moe
