// Where the block's data crosses ranks (docs/design.md, "Comm insertion points"). The block calls
// these hooks at fixed places of its forward and backward; what moves is decided by the parallel mode
// and EP comm path, one Exchange implementation each (src/comm/exchange_*.cpp), all of it through
// Comm collectives. The hooks run inside the timed call, in stream order on a device backend.
//
//   forward:  pack -> after_plan -> dispatch -> before_expert_ffn -> expert_ffn -> after_expert_ffn
//             -> combine (+ shared) -> after_combine
//   backward: combine' -> before_expert_ffn_backward -> expert_ffn' -> after_expert_ffn_backward
//             -> dispatch' (+ shared') -> reduce_input_grad, reduce_weight_grads
//
// The block's own plan and row buffers describe the rows of the tokens a rank holds (the "token
// side"). The expert FFN runs on the rows a rank's experts multiply (the "expert side",
// expert_rows()): the same buffers where no row moves, or the Exchange's own plan and buffers of the
// rows it received (all_to_all), filled by before_expert_ffn and read back by after_expert_ffn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "moe/comm.h"
#include "moe/config.h"
#include "moe/ops.h"
#include "moe/pack.h"
#include "moe/parallel.h"
#include "moe/status.h"

namespace moe {

class Backend;

// The plan and row buffers of the rows the expert FFN multiplies (handles: shared storage).
struct ExpertRows {
  DispatchPlan plan;
  Tensor x_rows;   // (plan.max_rows, H) run dtype
  Tensor y_rows;   // (plan.max_rows, H) run dtype
  Tensor dy_rows;  // (plan.max_rows, H) run dtype   forward_backward only
  Tensor dx_rows;  // (plan.max_rows, H) f32         forward_backward only
};

// The two kinds of collective a step's bytes travel by, for the bandwidth each can reach
// (measure_comm_peak): all-to-all-v, and the reductions and gathers (all-reduce, all-gather,
// reduce-scatter: bus bytes at one busbw, nccl-tests' convention).
enum class CollectiveKind { all_to_all, reduce };

// The largest message one kind of collective carried on a comm of several ranks: what the peak probe
// repeats.
struct CommMessage {
  Comm* comm = nullptr;  // null: no collective of this kind crossed ranks
  Dtype dtype = Dtype::f32;
  int64_t elements = 0;  // this rank's buffer: what it sends (all-to-all), sums or gathers (reduce)
};

// One collective as a meter timed it: its comm and this rank's wall time inside it.
struct TimedCollective {
  Comm* comm = nullptr;
  double seconds = 0;
};

// What one rank's exchanges moved, summed over the calls since reset (for rows: comm_s, comm_bytes).
struct CommTotals {
  double seconds = 0;       // wall time inside collectives
  int64_t bytes = 0;        // bytes this rank sent to other ranks (its own rows are not counted)
  int64_t a2a_bytes = 0;    // the part of `bytes` all-to-alls sent
  int64_t calls = 0;        // block calls (forward or forward_backward) metered
  CommMessage a2a, reduce;  // the largest message of each kind
};
// The totals and every collective that made them (a mark() keeps the totals and the log's length).
struct CommMeter : CommTotals {
  std::vector<TimedCollective> log;  // every collective, in order (measure_comm_transfer)
  size_t log_end = 0;                // a mark()'s: the length of the log it was taken from

  // Adds one collective of `kind` over `comm` whose buffer was `elements` of `dtype`, which sent
  // `sent` bytes to other ranks in `s` seconds.
  void add(CollectiveKind kind, Comm& comm, Dtype dtype, int64_t elements, int64_t sent, double s);
  // This meter's sums without its log (log_end says where it ended): what add_since needs, cheap enough
  // to take around every timed call.
  CommMeter mark() const;
  // Adds what `now` metered since `before` (a mark() of the same meter); the largest messages become now's.
  void add_since(const CommMeter& before, const CommMeter& now);
};

// The bus bandwidth (GB/s, nccl-tests' busbw: the bytes a rank sends to other ranks per second) an
// all-to-all and an all-reduce of a meter's largest messages reach on their comms, measured in this
// process by repeating them alone. 0 where the meter saw no collective of that kind.
struct CommPeak {
  double a2a_gbps = 0;
  double reduce_gbps = 0;
  // The seconds a meter's bytes would take at these peaks (0 where it moved none).
  double ideal_seconds(const CommMeter& m) const;
};
// Every rank calls it with its meter, after the calls it metered (the probes are collectives on the
// meter's comms, which must be alive).
Status measure_comm_peak(const CommMeter& meter, CommPeak& peak);

// The part of a meter's time inside collectives that moved bytes rather than waited for a later rank:
// a rank entering a collective first waits there until the last one arrives, and that last rank's time
// in it is the transfer (plus the transport's own latency). So each collective counts as the least
// time any rank of its comm spent in it, and `seconds` is their sum; the rest of meter.seconds is this
// rank's wait for the others (load skew). Every rank calls it with its meter, after the calls it metered
// (one all-gather per comm the meter used, in the order of first use; the meter's comms must be alive).
Status measure_comm_transfer(const CommMeter& meter, double& seconds);

class Exchange {
 public:
  virtual ~Exchange() = default;
  // This rank's share of the block.
  virtual const RankLayout& layout() const = 0;
  // The config the expert FFN op is made for: the rank's experts, and rows enough for every row it
  // can receive.
  virtual MoeConfig expert_config() const = 0;
  // Called once by the block after it allocated its token-side buffers (`local`, whose plan has
  // `tile_rows` alignment): the expert side's plan and buffers.
  virtual ExpertRows expert_rows(const ExpertRows& local, Backend& backend, int64_t tile_rows) = 0;

  // After pack: the ranks learn how many rows each sends to each expert's owner.
  virtual Status after_plan(const DispatchPlan& plan) = 0;
  // Around expert_ffn: dispatched rows (max_rows, H) go to the ranks owning their experts, and their
  // outputs come back into y_rows.
  virtual Status before_expert_ffn(Tensor& x_rows, const DispatchPlan& plan) = 0;
  virtual Status after_expert_ffn(Tensor& y_rows, const DispatchPlan& plan) = 0;
  // --ep-overlap N (all_to_all): instead of the three steps above, the exchange sends the rows in N
  // chunks and calls `experts(c, rows)` on chunk c's rows as they arrive, so that a chunk's dispatch and
  // combine overlap the experts of its neighbours; y_rows gets every output back. `tracer` records its
  // own stages (exchange_dispatch, exchange_combine) between the experts'. Each chunk keeps its rows
  // (x_rows, its plan) until the next call, for the backward.
  virtual bool overlaps_expert_ffn() const { return false; }
  virtual Status overlapped_expert_ffn(Tensor& x_rows, Tensor& y_rows, const DispatchPlan& plan,
                                       const StageTracer& tracer,
                                       const std::function<void(size_t, ExpertRows&)>& experts);
  // Its backward, in the same chunks: chunk c's dy rows travel while chunk c - 1's run through
  // `backward(c, rows)` (rows.dy_rows in, rows.dx_rows f32 out, beside the forward's rows.x_rows and
  // plan), and its dx rows come back into dx_rows (exchange_dy_rows, exchange_dx_rows).
  virtual Status overlapped_expert_ffn_backward(Tensor& dy_rows, Tensor& dx_rows, const DispatchPlan& plan,
                                                const StageTracer& tracer,
                                                const std::function<void(size_t, ExpertRows&)>& backward);
  // After combine: out (T, H) f32 partial sums become the block's output. Called only where
  // sums_combined_output(); elsewhere the combine writes the output directly (TokenSums).
  virtual bool sums_combined_output() const = 0;
  virtual Status after_combine(Tensor& out) = 0;
  // Whether this rank's shared-expert output and its input gradient join the sums: false on all but
  // one rank where every rank computes the shared expert on the same tokens and the sums are summed
  // across ranks (compact_psum).
  virtual bool adds_shared() const = 0;
  // Backward: row gradients travel like the rows, the other way round.
  virtual Status before_expert_ffn_backward(Tensor& dy_rows, const DispatchPlan& plan) = 0;
  virtual Status after_expert_ffn_backward(Tensor& dx_rows, const DispatchPlan& plan) = 0;
  // dx (T, H) f32 of a rank's tokens (called only where sums_input_grad()); the weight gradients (run
  // dtype) of the weights a rank holds: {dw1, dw3, dw2} and, with a shared expert, {dsw1, dsw3, dsw2}.
  virtual bool sums_input_grad() const = 0;
  virtual Status reduce_input_grad(Tensor& dx) = 0;
  virtual Status reduce_weight_grads(const std::vector<Tensor*>& grads) = 0;

  // Where a rank's plan covers every token but it holds a slice (ring_ag_rs), the block's token side
  // is split: pack, dispatch and combine run on every token, the shared expert, the loss and the
  // outputs on the rank's own. gather_tokens: all (T, H) = the ranks' held (T/R, H) slices in rank
  // order (x before the dispatch; dy, f32, before the combine's backward). scatter_tokens: held (T/R, H)
  // f32 = the rank's slice of the sum over ranks of all (T, H) f32 (the combined output; dx), plus
  // held's own values where held_holds_start (the shared expert's part).
  virtual bool gathers_tokens() const { return false; }
  virtual Status gather_tokens(const Tensor& held, Tensor& all);
  virtual Status scatter_tokens(const Tensor& all, Tensor& held, bool held_holds_start);

  // What the hooks moved since reset_meter().
  const CommMeter& meter() const { return meter_; }
  void reset_meter() { meter_ = CommMeter{}; }
  void count_call() { ++meter_.calls; }

 protected:
  CommMeter meter_;
};

// The bytes a rank of `ranks` sends per call of cfg's pass on its comm path, modeled as the seed's hand
// roofline does (spec §5) with routing spread evenly over experts: dp the all-reduce of every weight
// gradient; compact_psum the all-reduce of the (T, H) f32 output (and of dx); all_to_all the rows of
// its real_assignments / R assignments whose experts other ranks own ((R-1)/R of them) out and back
// (x and y; dy and dx in the backward) plus the shared gradients' all-reduce; ring_ag_rs the
// all-gather of x and reduce-scatter of the f32 output ((R-1)/R of (T, H) each; backward: of dy and
// dx too) plus the shared gradients' all-reduce. All-reduces count
// 2 (R-1)/R of the buffer (nccl-tests' bus bytes). 0 on one rank.
int64_t modeled_comm_bytes(const MoeConfig& cfg, int ranks, int64_t real_assignments);

// Ok, or why cfg's parallel mode and comm path cannot run over `world` (asked before allocating).
Status exchange_supports(const MoeConfig& cfg, const Comm& world);
// REQUIRES: exchange_supports(cfg, world) is ok. `world` outlives the Exchange.
std::unique_ptr<Exchange> make_exchange(const MoeConfig& cfg, Comm& world);

}  // namespace moe
