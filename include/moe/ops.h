// The block's stages as ops (docs/design.md, "The block as ops"):
//
//   pack -> dispatch -> expert_ffn (up: GEMM(s) + SwiGLU, down: GEMM) -> combine, + shared_expert
//
// A backend (moe/backend.h) makes each op for one configuration. An op owns its scratch and whatever
// its forward keeps for its backward, allocated in the backend's memory when it is made and sized for
// the worst routing of the configuration, so no op allocates while timing. Every method takes its
// outputs first, then its inputs; dimensions come from the tensors and the plan, and every tensor is
// in the backend's memory. Methods only enqueue work on an asynchronous backend: Backend::synchronize()
// waits for it.
//
// Row buffers are (plan.max_rows, width); rows past the plan's group_offset[E] are never read.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "moe/config.h"
#include "moe/pack.h"
#include "moe/quantize.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {

class Backend;
void synchronize(Backend* backend);  // Backend::synchronize(), callable where backend.h is not included

// The ops a backend may support, for supports(), --list and the op tests.
// convert and loss are the block's element-wise glue; dense_gemm is the ceiling.
enum class OpKind { pack, dispatch, expert_ffn, combine, shared_expert, convert, loss, dense_gemm };
inline constexpr OpKind kAllOps[] = {OpKind::pack,    OpKind::dispatch,      OpKind::expert_ffn,
                                     OpKind::combine, OpKind::shared_expert, OpKind::convert,
                                     OpKind::loss,    OpKind::dense_gemm};
const char* name(OpKind op);

// Called around the named sub-stages of an op (for --trace-dir); `start`/`end` bracket work the
// backend has finished (the tracer synchronizes the backend when it is active).
class StageTracer {
 public:
  using Clock = std::chrono::steady_clock;
  using Observer = std::function<void(const char* stage, Clock::time_point start, Clock::time_point end)>;

  StageTracer() = default;
  explicit StageTracer(Backend* backend) : backend_(backend) {}
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  template <typename Fn>
  void operator()(const char* stage, Fn&& fn) const;

 private:
  Backend* backend_ = nullptr;
  Observer observer_;
};

// What every op is made with. The references stay valid for the op's life (the block owns them).
struct OpContext {
  const MoeConfig& cfg;
  Backend& backend;  // its kernel() is the op's kernel configuration
  const StageTracer& tracer;
  int64_t tile_rows;  // the plan's layout (layout_tile_rows)
};

// What an expert FFN keeps from its forward for its backward, in the run dtype and sized for the worst
// routing of ctx: h (max_rows, 2M) [gate | up] and g (max_rows, M), SwiGLU's output; with_gradients
// (forward_backward) also dh (max_rows, 2M) and dg (max_rows, M), where the forward's h and g go under
// expert_mlp remat (the backward overwrites them, so it must recompute them).
struct ExpertActivations {
  ExpertActivations(const OpContext& ctx, bool with_gradients);
  Tensor h, g, dh, dg;
};

// A SwiGLU feed-forward's weights: routed experts (E, H, M)/(E, M, H), or the shared expert with
// E = 1 dropped: (H, S)/(S, H). w13 = [w1 | w3] along the last dim; empty when the caller has not
// built it (a fused op then concatenates inside the call, as the seed's value_and_grad does).
struct FfnWeights {
  Tensor w1;   // gate (E, H, M) (silu applied)
  Tensor w3;   // up   (E, H, M)
  Tensor w2;   // down (E, M, H)
  Tensor w13;  // (E, H, 2M) or empty
  // int8_routed_prequant's weights, quantized outside the timed calls (MoeInputs); empty otherwise.
  QuantizedWeight q13 = {}, q1 = {}, q3 = {}, q2 = {};
};
struct FfnWeightGrads {
  Tensor dw1;  // (E, H, M)
  Tensor dw3;  // (E, H, M)
  Tensor dw2;  // (E, M, H)
};

// Sort the routing's assignments by expert and lay them out as the plan. Integer op: no backward.
class PackOp {
 public:
  virtual ~PackOp() = default;
  virtual void forward(DispatchPlan& plan, const RoutingTensors& routing) = 0;
};

// Where an op that sums rows into their tokens (combine, the dispatch's backward) writes:
// out (T, H), float32 or the run dtype, = start + the op's sums. start is acc (T, H) f32 where
// acc_holds_start (the shared expert's part), else zero; otherwise acc is the op's float32 scratch.
// out may be acc itself. The block sums into acc and converts only where the Exchange reduces the
// f32 sums across ranks; on one rank the op writes the block's output directly (one pass over
// (T, H) instead of three: zeroing, summing, converting).
struct TokenSums {
  Tensor& out;
  Tensor& acc;
  bool acc_holds_start;
};

// Gather token rows into the expert-major buffer, and the backward sum back to tokens.
class DispatchOp {
 public:
  virtual ~DispatchOp() = default;
  // x_rows (max_rows, H) run dtype: row r = x[token(r)], padding rows zero. x (T, H).
  virtual void forward(Tensor& x_rows, const Tensor& x, const DispatchPlan& plan) = 0;
  // dx.out = start + the sum of the rows of each token in dx_rows (max_rows, H) f32.
  virtual void backward(const TokenSums& dx, const Tensor& dx_rows, const DispatchPlan& plan) = 0;
};

// The routed experts' SwiGLU MLP on the row buffer: one op per quant mode (moe/backend.h).
class ExpertFfnOp {
 public:
  virtual ~ExpertFfnOp() = default;
  // up: x_rows (max_rows, H) -> the op's own up projection and SwiGLU output (times the row weight
  // for preweight impls). down: that output -> y_rows (max_rows, H) run dtype. Split so the seed's
  // --stage-timing can time them apart; forward() is up then down. REQUIRES for down: up ran on the
  // same plan (a device backend reads the plan's group sizes once, in up).
  virtual void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) = 0;
  virtual void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan& plan) = 0;
  void forward(Tensor& y_rows, const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) {
    up(x_rows, w, plan);
    down(y_rows, w, plan);
  }
  // dx_rows (max_rows, H) f32 and dw from dy_rows (max_rows, H) run dtype; REQUIRES the forward of
  // the same inputs just ran (remat recomputes from x_rows what that forward did not keep).
  virtual void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                        const FfnWeights& w, const DispatchPlan& plan) = 0;
  // Bytes the forward keeps for the backward at `rows` buffer rows (excluding x_rows).
  virtual int64_t saved_bytes(int64_t rows) const = 0;
};
// What a SwiGLU expert FFN's forward keeps at `rows` buffer rows: h (rows, 2M) and g (rows, M) in the run
// dtype, or nothing where its backward recomputes them (MoeConfig::recomputes_expert_mlp).
inline int64_t expert_mlp_saved_bytes(const MoeConfig& cfg, int64_t rows) {
  return cfg.recomputes_expert_mlp() ? 0 : rows * 3 * cfg.mlp_dim * int64_t(dtype_size(cfg.dtype));
}

// Weighted sum of each token's expert rows, and its backward (spec §3.5).
class CombineOp {
 public:
  virtual ~CombineOp() = default;
  // out.out = start + sum over the token's live rows of weight * y_rows[r]; y_rows (max_rows, H).
  virtual void forward(const TokenSums& out, const Tensor& y_rows, const DispatchPlan& plan,
                       const RoutingTensors& routing) = 0;
  // dy_rows (max_rows, H) run dtype = weight * dy[token(r)], padding rows zero; dy (T, H) f32.
  virtual void backward(Tensor& dy_rows, const Tensor& dy, const DispatchPlan& plan,
                        const RoutingTensors& routing) = 0;
};

// The shared expert: a dense SwiGLU MLP on every token with f32 activations (spec §2.5).
class SharedExpertOp {
 public:
  virtual ~SharedExpertOp() = default;
  // out (T, H) f32 = shared(x) (overwritten); x (T, H) run dtype.
  virtual void forward(Tensor& out, const Tensor& x, const FfnWeights& w) = 0;
  // dx (T, H) f32 = d shared / dx (overwritten), dw; dy (T, H) f32.
  virtual void backward(Tensor& dx, FfnWeightGrads& dw, const Tensor& dy, const Tensor& x,
                        const FfnWeights& w) = 0;
  virtual int64_t saved_bytes() const = 0;
};

template <typename Fn>
void StageTracer::operator()(const char* stage, Fn&& fn) const {
  if (!observer_) return fn();
  synchronize(backend_);
  const Clock::time_point start = Clock::now();
  fn();
  synchronize(backend_);
  observer_(stage, start, Clock::now());
}

}  // namespace moe
