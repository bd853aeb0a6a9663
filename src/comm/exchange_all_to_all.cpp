// ep all_to_all: tokens and experts sharded (moe/parallel.h). Each rank packs its own tokens by global
// expert; since the plan is expert-major and rank p owns experts [p E/R, (p+1) E/R), the live rows
// bound for each rank are contiguous groups. Per step:
//   after_plan:   an all-to-all of the (rank, local expert) live-row counts and of the rows' combine
//                 weights (preweight impls multiply by them); the expert side's plan is built from them
//                 (host): local expert j's group is its rows from rank 0, then rank 1, ..., padded at
//                 its tail to the layout's tile, so the expert FFN runs as on one rank;
//   dispatch:     live rows (no padding) packed in plan order -> all-to-all-v -> scattered into the
//                 expert side's groups (padding rows zeroed, as the grouped GEMMs require);
//   combine:      the expert outputs gathered in arrival order -> all-to-all-v back -> scattered into
//                 the token side's rows; the combine then sums each token's rows on its own rank.
// Backward: dy rows travel like x rows, dx rows like y rows (f32), in the forward's chunks under
// --ep-overlap (each chunk's expert-side rows and plan kept from its forward). The shared expert's gradients
// are all-reduced (its weights are replicated, its tokens sharded). On a data x expert mesh all of this
// happens among the X ranks of a data replica, and the routed gradients are summed over the replicas. Each
// rank moves about T*K*H/R elements each way per exchange (the rows whose expert another rank owns), not T*H.
// Host memory only (the plan is rebuilt on the host each step).
#include <fmt/format.h>

#include <cstring>

#include "comm/comm_worker.h"
#include "comm/exchanges.h"
#include "moe/backend.h"

namespace moe {
namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// dst row dst_rows[i] = src row src_rows[i] (row_bytes each); an empty index list means i itself.
void copy_rows(void* dst, const std::vector<int64_t>& dst_rows, const void* src,
               const std::vector<int64_t>& src_rows, int64_t n, size_t row_bytes) {
#pragma omp parallel for schedule(static) if (n * int64_t(row_bytes) >= (int64_t(1) << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = dst_rows.empty() ? i : dst_rows[size_t(i)];
    const int64_t s = src_rows.empty() ? i : src_rows[size_t(i)];
    std::memcpy(static_cast<char*>(dst) + size_t(d) * row_bytes,
                static_cast<const char*>(src) + size_t(s) * row_bytes, row_bytes);
  }
}

// Zeroes the padding rows (each group's tail past its live rows) of rows (max_rows, width).
void zero_padding_rows(Tensor& rows, const HostPlan& p) {
  const size_t row_bytes = rows.bytes() / size_t(rows.dim(0));
  char* base = static_cast<char*>(rows.raw());
  for (int64_t e = 0; e < p.experts; ++e) {
    const int64_t begin = p.group_offset[e] + p.group_live[e], end = p.group_offset[e + 1];
    if (end > begin) std::memset(base + size_t(begin) * row_bytes, 0, size_t(end - begin) * row_bytes);
  }
}

// The first of n rows that chunk c of `chunks` takes (the rows of a group split as evenly as can be).
int64_t chunk_begin(int64_t n, int64_t c, int64_t chunks) {
  return n * c / chunks;
}

// One chunk of the step's rows (all of them without --ep-overlap): of every (rank, local expert) group
// of live rows, its share, with the expert side's plan and buffers of the rows it receives.
struct Chunk {
  ExpertRows ex;
  Tensor send, recv;                          // (T_l*K, H), (T*K, H) run dtype: rows in flight
  Tensor send_f32, recv_f32;                  // (T_l*K, H), (T*K, H) f32: dx rows in flight (backward)
  std::vector<int64_t> send_rows, recv_rows;  // (R) rows to and from each rank
  std::vector<int64_t> send_row_of;           // token-side row of each row sent, in order
  std::vector<int64_t> recv_pos;              // expert-side row of each row received, in order
};

class AllToAllExchange final : public Exchange {
 public:
  AllToAllExchange(const MoeConfig& cfg, Comm& world)
      : layout_(rank_layout(cfg, world.rank(), world.size())),
        world_(world),
        expert_(world.split(layout_.data_rank, layout_.expert_rank)),
        data_(world.split(layout_.expert_rank, layout_.data_rank)),
        R_(layout_.mesh_expert),
        chunks_(size_t(cfg.ep_overlap)) {
    // Rows of every token of its replica may arrive: the expert side is sized for all their T*K.
    expert_cfg_ = cfg;
    expert_cfg_.tokens = layout_.group_tokens;
    expert_cfg_.experts = layout_.experts;
    H_ = cfg.hidden;
    forward_backward_ = cfg.bench_pass == BenchPass::forward_backward;
    for (Chunk& k : chunks_) {
      k.send_rows.assign(size_t(R_), 0);
      k.recv_rows.assign(size_t(R_), 0);
    }
    // The overlapped pipeline's collectives run on a thread of their own where the comm allows it.
    if (chunks_.size() > 1) worker_ = std::make_unique<CommWorker>(expert_->calls_from_any_thread());
  }

  const RankLayout& layout() const override { return layout_; }
  MoeConfig expert_config() const override { return expert_cfg_; }

  // Every chunk has buffers of the whole step's size (a chunk may hold every row: one busy expert).
  ExpertRows expert_rows(const ExpertRows& local, Backend& backend, int64_t tile_rows) override {
    MOE_CHECK(local.x_rows.on_host(), "the all_to_all exchange runs on host memory");
    tile_rows_ = tile_rows;
    const Dtype dt = local.x_rows.dtype();
    const int64_t send_max = local.plan.tokens * local.plan.topk, recv_max = expert_cfg_.assignments();
    for (Chunk& k : chunks_) {
      k.ex.plan = allocate_plan(expert_cfg_, tile_rows, backend.memory());
      k.ex.x_rows = backend.empty(dt, {k.ex.plan.max_rows, H_});
      k.ex.y_rows = backend.empty(dt, {k.ex.plan.max_rows, H_});
      k.send = backend.empty(dt, {send_max, H_});
      k.recv = backend.empty(dt, {recv_max, H_});
      if (forward_backward_) {
        k.ex.dy_rows = backend.empty(dt, {k.ex.plan.max_rows, H_});
        k.ex.dx_rows = backend.empty(Dtype::f32, {k.ex.plan.max_rows, H_});
        k.send_f32 = backend.empty(Dtype::f32, {send_max, H_});
        k.recv_f32 = backend.empty(Dtype::f32, {recv_max, H_});
      }
    }
    ExpertRows& ex = chunks_[0].ex;
    counts_send_ = Tensor(Dtype::s64, {R_ * layout_.experts});
    counts_recv_ = Tensor(Dtype::s64, {R_ * layout_.experts});
    weights_send_ = Tensor(Dtype::f32, {send_max});
    weights_recv_ = Tensor(Dtype::f32, {recv_max});
    return ex;
  }

  Status after_plan(const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t El = layout_.experts, N = int64_t(chunks_.size());
    // Live rows per (owner, local expert), and the live rows in plan order (= owner order) with their
    // weights; each chunk's rows in the same order.
    int64_t* counts = counts_send_.data<int64_t>();
    float* w_send = weights_send_.data<float>();
    std::vector<int64_t> send_all(size_t(R_), 0);
    int64_t sent = 0;
    for (Chunk& k : chunks_) {
      k.send_row_of.clear();
      std::fill(k.send_rows.begin(), k.send_rows.end(), 0);
    }
    for (int p_ = 0; p_ < R_; ++p_)
      for (int64_t j = 0; j < El; ++j) {
        const int64_t e = p_ * El + j, live = p.group_live[e], first = p.group_offset[e];
        counts[p_ * El + j] = live;
        send_all[size_t(p_)] += live;
        for (int64_t r = first; r < first + live; ++r) w_send[sent++] = p.row_weight[r];
        for (int64_t c = 0; c < N; ++c) {
          Chunk& k = chunks_[size_t(c)];
          const int64_t b = chunk_begin(live, c, N), end = chunk_begin(live, c + 1, N);
          for (int64_t r = first + b; r < first + end; ++r) k.send_row_of.push_back(r);
          k.send_rows[size_t(p_)] += end - b;
        }
      }
    const std::vector<int64_t> per_rank(size_t(R_), El);
    MOE_RETURN_IF_ERROR(exchange(counts_recv_, per_rank, counts_send_, per_rank));
    const int64_t* got = counts_recv_.data<int64_t>();
    std::vector<int64_t> recv_all(size_t(R_), 0);
    for (int src = 0; src < R_; ++src)
      for (int64_t j = 0; j < El; ++j) recv_all[size_t(src)] += got[src * El + j];
    MOE_RETURN_IF_ERROR(exchange(weights_recv_, recv_all, weights_send_, send_all));
    for (int64_t c = 0; c < N; ++c) build_expert_plan(chunks_[size_t(c)], got, c);
    return Status::ok();
  }

  Status before_expert_ffn(Tensor& x_rows, const DispatchPlan&) override {
    return to_experts(x_rows, chunks_[0].ex.x_rows);
  }
  Status after_expert_ffn(Tensor& y_rows, const DispatchPlan& plan) override {
    Chunk& k = chunks_[0];
    return from_experts(y_rows, plan, k, k.ex.y_rows, k.recv, k.send);
  }

  // --ep-overlap N: chunk c + 1's rows travel while chunk c's run through the experts, and chunk c's
  // outputs travel back while chunk c + 1's do. The worker runs the collectives in submit order:
  // dispatch 0, dispatch 1, combine 0, dispatch 2, combine 1, ... (the same on every rank); this thread
  // packs and places rows and runs the experts.
  bool overlaps_expert_ffn() const override { return chunks_.size() > 1; }
  Status overlapped_expert_ffn(Tensor& x_rows, Tensor& y_rows, const DispatchPlan& plan,
                               const StageTracer& tracer,
                               const std::function<void(size_t, ExpertRows&)>& experts) override {
    // The outputs go back from the buffers the rows came in by (recv), into those they left (send).
    static constexpr Direction kForward{&ExpertRows::x_rows, &ExpertRows::y_rows, &Chunk::recv,
                                        &Chunk::send,        "exchange_dispatch", "exchange_combine"};
    return pipeline(x_rows, y_rows, plan, tracer, kForward, experts);
  }
  Status overlapped_expert_ffn_backward(Tensor& dy_rows, Tensor& dx_rows, const DispatchPlan& plan,
                                        const StageTracer& tracer,
                                        const std::function<void(size_t, ExpertRows&)>& backward) override {
    MOE_CHECK(forward_backward_, "an overlapped backward of an exchange made for forward");
    static constexpr Direction kBackward{&ExpertRows::dy_rows, &ExpertRows::dx_rows, &Chunk::recv_f32,
                                         &Chunk::send_f32,     "exchange_dy_rows",   "exchange_dx_rows"};
    return pipeline(dy_rows, dx_rows, plan, tracer, kBackward, backward);
  }

  bool sums_combined_output() const override { return false; }
  Status after_combine(Tensor&) override { return Status::ok(); }
  bool adds_shared() const override { return true; }
  Status before_expert_ffn_backward(Tensor& dy_rows, const DispatchPlan&) override {
    return to_experts(dy_rows, chunks_[0].ex.dy_rows);
  }
  Status after_expert_ffn_backward(Tensor& dx_rows, const DispatchPlan& plan) override {
    Chunk& k = chunks_[0];
    return from_experts(dx_rows, plan, k, k.ex.dx_rows, k.recv_f32, k.send_f32);
  }
  bool sums_input_grad() const override { return false; }
  Status reduce_input_grad(Tensor&) override { return Status::ok(); }
  // grads = {dw1, dw3, dw2[, dsw1, dsw3, dsw2]}: the routed ones are of the rank's own experts, summed
  // over the replicas that hold them too; the shared expert's (its tokens differ on every rank) over all.
  Status reduce_weight_grads(const std::vector<Tensor*>& grads) override {
    MOE_RETURN_IF_ERROR(all_reduce_each(meter_, *data_, {grads.begin(), grads.begin() + 3}));
    return all_reduce_each(meter_, world_, {grads.begin() + 3, grads.end()});
  }

 private:
  // What one overlapped pass moves: each chunk's rows arrive (in k.recv, run dtype) into its expert-side
  // `in` rows, `work` makes its `out` rows from them, and those go back from the chunk's `leaving`
  // staging (expert side, arrival order) into its `arriving` one (token side, plan order).
  struct Direction {
    Tensor ExpertRows::*in;
    Tensor ExpertRows::*out;
    Tensor Chunk::*leaving;
    Tensor Chunk::*arriving;
    const char* there;  // the stage names of the two ways
    const char* back;
  };

  // One overlapped pass over the chunks: chunk c + 1's rows (of `rows`, token side) travel while chunk
  // c's run through `work`, and chunk c's results travel back while chunk c + 1's do, into `results`
  // (token side). The worker runs the collectives in submit order: there 0, there 1, back 0, there 2,
  // back 1, ... (the same on every rank); this thread packs and places rows and runs `work`.
  Status pipeline(Tensor& rows, Tensor& results, const DispatchPlan& plan, const StageTracer& tracer,
                  const Direction& d, const std::function<void(size_t, ExpertRows&)>& work) {
    const size_t N = chunks_.size();
    std::vector<std::future<Status>> sent(N), returned(N);
    auto send = [&](size_t c) {
      Chunk& k = chunks_[c];
      tracer(d.there, [&] { pack_rows(k.send, rows, k.send_row_of); });
      sent[c] = worker_->submit([this, &k] { return exchange(k.recv, k.recv_rows, k.send, k.send_rows); });
    };
    Status status;
    send(0);
    for (size_t c = 0; c < N; ++c) {
      Chunk& k = chunks_[c];
      if (c + 1 < N) send(c + 1);
      tracer(d.there, [&] {
        keep(status, sent[c].get());
        place_rows(k.ex.*d.in, k, k.recv);
      });
      work(c, k.ex);
      tracer(d.back, [&] { pack_rows(k.*d.leaving, k.ex.*d.out, k.recv_pos); });
      returned[c] = worker_->submit(
          [this, &k, &d] { return exchange(k.*d.arriving, k.send_rows, k.*d.leaving, k.recv_rows); });
    }
    tracer(d.back, [&] {
      for (size_t c = 0; c < N; ++c) {
        keep(status, returned[c].get());
        Chunk& k = chunks_[c];
        copy_rows(results.raw(), k.send_row_of, (k.*d.arriving).raw(), {}, int64_t(k.send_row_of.size()),
                  row_bytes(results));
      }
      zero_padding_rows(results, host_view(plan));
    });
    return status;
  }

  static void keep(Status& kept, Status s) {
    if (!s && kept) kept = std::move(s);
  }
  size_t row_bytes(const Tensor& rows) const { return size_t(H_) * dtype_size(rows.dtype()); }

  // An all-to-all-v of rows (counts in rows of the tensors' row width), metered.
  Status exchange(Tensor& recv, const std::vector<int64_t>& recv_rows, const Tensor& send,
                  const std::vector<int64_t>& send_rows) {
    const int64_t width = send.dim(0) == 0 ? 0 : send.numel() / send.dim(0);
    std::vector<int64_t> sc(static_cast<size_t>(R_)), rc(static_cast<size_t>(R_));
    int64_t remote = 0, total = 0;
    for (int p = 0; p < R_; ++p) {
      sc[size_t(p)] = send_rows[size_t(p)] * width;
      rc[size_t(p)] = recv_rows[size_t(p)] * width;
      if (p != expert_->rank()) remote += sc[size_t(p)];
      total += sc[size_t(p)];
    }
    return metered(meter_, CollectiveKind::all_to_all, *expert_, send.dtype(), total,
                   remote * int64_t(dtype_size(send.dtype())),
                   [&] { return expert_->all_to_all_v(recv, rc, send, sc); });
  }

  // Chunk c's expert-side plan from the received counts (src-major (R, El)): local expert j's group is
  // chunk c's share of its rows from rank 0, 1, ..., padded at the tail; k.recv_pos[i] is the row of
  // the chunk's i-th received row, and weights_recv_ (the whole step's, in arrival order) gives its weight.
  void build_expert_plan(Chunk& k, const int64_t* got, int64_t c) {
    int64_t* offset = k.ex.plan.group_offset.data<int64_t>();        // (El+1)
    int64_t* live = k.ex.plan.group_live.data<int64_t>();            // (El)
    int32_t* assignment = k.ex.plan.row_assignment.data<int32_t>();  // (max_rows)
    float* weight = k.ex.plan.row_weight.data<float>();              // (max_rows)
    const int64_t El = layout_.experts, N = int64_t(chunks_.size());
    std::fill(k.recv_rows.begin(), k.recv_rows.end(), 0);
    offset[0] = 0;
    for (int64_t j = 0; j < El; ++j) {
      live[j] = 0;
      for (int src = 0; src < R_; ++src) {
        const int64_t n = got[src * El + j], part = chunk_begin(n, c + 1, N) - chunk_begin(n, c, N);
        live[j] += part;
        k.recv_rows[size_t(src)] += part;
      }
      offset[j + 1] = offset[j] + round_up(live[j], tile_rows_);
    }
    std::vector<int64_t> fill(offset, offset + El);
    k.recv_pos.clear();
    const float* w = weights_recv_.data<float>();
    int64_t arrival = 0;  // the row's place in the whole step's arrival order (src, j, row)
    for (int src = 0; src < R_; ++src)
      for (int64_t j = 0; j < El; ++j) {
        const int64_t n = got[src * El + j];
        for (int64_t i = chunk_begin(n, c, N); i < chunk_begin(n, c + 1, N); ++i) {
          const int64_t row = fill[size_t(j)]++;
          weight[row] = w[arrival + i];
          assignment[row] = int32_t(k.recv_pos.size());  // the arrival index: any id >= 0 marks it live
          k.recv_pos.push_back(row);
        }
        arrival += n;
      }
    int64_t live_rows = 0;
    for (int64_t j = 0; j < El; ++j) {
      live_rows += live[j];
      for (int64_t r = offset[j] + live[j]; r < offset[j + 1]; ++r) {
        assignment[r] = -1;
        weight[r] = 0;
      }
    }
    int64_t* stats = k.ex.plan.stats.data<int64_t>();
    stats[0] = offset[El];
    stats[1] = live_rows;
    stats[2] = 0;
  }

  // staging = rows[order[i]] for each i: rows packed in the order they travel.
  void pack_rows(Tensor& staging, const Tensor& rows, const std::vector<int64_t>& order) {
    copy_rows(staging.raw(), {}, rows.raw(), order, int64_t(order.size()), row_bytes(rows));
  }
  // The rows a chunk received (staging, in arrival order) into the expert side's groups.
  void place_rows(Tensor& expert_rows, const Chunk& k, const Tensor& staging) {
    copy_rows(expert_rows.raw(), k.recv_pos, staging.raw(), {}, int64_t(k.recv_pos.size()),
              row_bytes(expert_rows));
    zero_padding_rows(expert_rows, host_view(k.ex.plan));
  }

  // The token side's rows (the whole step's chunk) -> staging in travel order -> all-to-all -> the expert
  // side's rows.
  Status to_experts(const Tensor& rows, Tensor& expert_rows) {
    Chunk& k = chunks_[0];
    pack_rows(k.send, rows, k.send_row_of);
    MOE_RETURN_IF_ERROR(exchange(k.recv, k.recv_rows, k.send, k.send_rows));
    place_rows(expert_rows, k, k.recv);
    return Status::ok();
  }

  // The expert side's rows -> staging in arrival order -> all-to-all back -> the token side's rows.
  Status from_experts(Tensor& rows, const DispatchPlan& plan, const Chunk& k, const Tensor& expert_rows,
                      Tensor& send, Tensor& recv) {
    pack_rows(send, expert_rows, k.recv_pos);
    MOE_RETURN_IF_ERROR(exchange(recv, k.send_rows, send, k.recv_rows));
    copy_rows(rows.raw(), k.send_row_of, recv.raw(), {}, int64_t(k.send_row_of.size()), row_bytes(rows));
    zero_padding_rows(rows, host_view(plan));
    return Status::ok();
  }

  RankLayout layout_;
  MoeConfig expert_cfg_;
  Comm& world_;
  std::unique_ptr<Comm> expert_;  // the X ranks of its data replica: rows travel among them
  std::unique_ptr<Comm> data_;    // the D ranks holding its experts, one per replica
  const int R_;                   // X
  int64_t H_ = 0, tile_rows_ = 1;
  bool forward_backward_ = false;
  std::vector<Chunk> chunks_;           // --ep-overlap of them (1: the whole step)
  std::unique_ptr<CommWorker> worker_;  // the overlapped pipeline's collectives
  Tensor counts_send_, counts_recv_;    // (R * El) s64: live rows per (rank, local expert)
  Tensor weights_send_, weights_recv_;  // (T_l*K), (T*K) f32: the rows' combine weights
};

}  // namespace

std::unique_ptr<Exchange> make_all_to_all_exchange(const MoeConfig& cfg, Comm& world) {
  return std::make_unique<AllToAllExchange>(cfg, world);
}

}  // namespace moe
