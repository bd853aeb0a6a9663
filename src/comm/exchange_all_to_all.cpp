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
// Backward: dy rows travel like x rows, dx rows like y rows (f32). The shared expert's gradients are
// all-reduced (its weights are replicated, its tokens sharded). On a data x expert mesh all of this
// happens among the X ranks of a data replica, and the routed gradients are summed over the replicas. Each
// rank moves about T*K*H/R elements each way per exchange (the rows whose expert another rank owns), not T*H.
// Host memory only (the plan is rebuilt on the host each step).
#include <fmt/format.h>

#include <cstring>

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

class AllToAllExchange final : public Exchange {
 public:
  AllToAllExchange(const MoeConfig& cfg, Comm& world)
      : layout_(rank_layout(cfg, world.rank(), world.size())),
        world_(world),
        expert_(world.split(layout_.data_rank, layout_.expert_rank)),
        data_(world.split(layout_.expert_rank, layout_.data_rank)),
        R_(layout_.mesh_expert) {
    // Rows of every token of its replica may arrive: the expert side is sized for all their T*K.
    expert_cfg_ = cfg;
    expert_cfg_.tokens = layout_.group_tokens;
    expert_cfg_.experts = layout_.experts;
    H_ = cfg.hidden;
    forward_backward_ = cfg.bench_pass == BenchPass::forward_backward;
    send_rows_.assign(size_t(R_), 0);
    recv_rows_.assign(size_t(R_), 0);
  }

  const RankLayout& layout() const override { return layout_; }
  MoeConfig expert_config() const override { return expert_cfg_; }

  ExpertRows expert_rows(const ExpertRows& local, Backend& backend, int64_t tile_rows) override {
    MOE_CHECK(local.x_rows.on_host(), "the all_to_all exchange runs on host memory");
    tile_rows_ = tile_rows;
    const Dtype dt = local.x_rows.dtype();
    const int64_t send_max = local.plan.tokens * local.plan.topk, recv_max = expert_cfg_.assignments();
    ex_.plan = allocate_plan(expert_cfg_, tile_rows, backend.memory());
    ex_.x_rows = backend.empty(dt, {ex_.plan.max_rows, H_});
    ex_.y_rows = backend.empty(dt, {ex_.plan.max_rows, H_});
    send_ = backend.empty(dt, {send_max, H_});
    recv_ = backend.empty(dt, {recv_max, H_});
    if (forward_backward_) {
      ex_.dy_rows = backend.empty(dt, {ex_.plan.max_rows, H_});
      ex_.dx_rows = backend.empty(Dtype::f32, {ex_.plan.max_rows, H_});
      send_f32_ = backend.empty(Dtype::f32, {send_max, H_});
      recv_f32_ = backend.empty(Dtype::f32, {recv_max, H_});
    }
    counts_send_ = Tensor(Dtype::s64, {R_ * layout_.experts});
    counts_recv_ = Tensor(Dtype::s64, {R_ * layout_.experts});
    weights_send_ = Tensor(Dtype::f32, {send_max});
    weights_recv_ = Tensor(Dtype::f32, {recv_max});
    return ex_;
  }

  Status after_plan(const DispatchPlan& plan) override {
    const HostPlan p = host_view(plan);
    const int64_t El = layout_.experts;
    // Live rows per (owner, local expert), and the live rows in plan order (= owner order).
    int64_t* counts = counts_send_.data<int64_t>();
    float* w_send = weights_send_.data<float>();
    send_row_of_.clear();
    for (int p_ = 0; p_ < R_; ++p_) {
      send_rows_[size_t(p_)] = 0;
      for (int64_t j = 0; j < El; ++j) {
        const int64_t e = p_ * El + j, live = p.group_live[e];
        counts[p_ * El + j] = live;
        send_rows_[size_t(p_)] += live;
        for (int64_t r = p.group_offset[e]; r < p.group_offset[e] + live; ++r) {
          w_send[send_row_of_.size()] = p.row_weight[r];
          send_row_of_.push_back(r);
        }
      }
    }
    const std::vector<int64_t> per_rank(size_t(R_), El);
    MOE_RETURN_IF_ERROR(exchange(counts_recv_, per_rank, counts_send_, per_rank));
    const int64_t* got = counts_recv_.data<int64_t>();
    for (int src = 0; src < R_; ++src) {
      recv_rows_[size_t(src)] = 0;
      for (int64_t j = 0; j < El; ++j) recv_rows_[size_t(src)] += got[src * El + j];
    }
    MOE_RETURN_IF_ERROR(exchange(weights_recv_, recv_rows_, weights_send_, send_rows_));
    build_expert_plan(got);
    return Status::ok();
  }

  Status before_expert_ffn(Tensor& x_rows, const DispatchPlan&) override {
    return to_experts(ex_.x_rows, x_rows, send_, recv_);
  }
  Status after_expert_ffn(Tensor& y_rows, const DispatchPlan& plan) override {
    return from_experts(y_rows, plan, ex_.y_rows, recv_, send_);
  }
  bool sums_combined_output() const override { return false; }
  Status after_combine(Tensor&) override { return Status::ok(); }
  bool adds_shared() const override { return true; }
  Status before_expert_ffn_backward(Tensor& dy_rows, const DispatchPlan&) override {
    return to_experts(ex_.dy_rows, dy_rows, send_, recv_);
  }
  Status after_expert_ffn_backward(Tensor& dx_rows, const DispatchPlan& plan) override {
    return from_experts(dx_rows, plan, ex_.dx_rows, recv_f32_, send_f32_);
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
  // An all-to-all-v of rows (counts in rows of the tensors' row width), metered.
  Status exchange(Tensor& recv, const std::vector<int64_t>& recv_rows, const Tensor& send,
                  const std::vector<int64_t>& send_rows) {
    const int64_t width = send.dim(0) == 0 ? 0 : send.numel() / send.dim(0);
    std::vector<int64_t> sc(static_cast<size_t>(R_)), rc(static_cast<size_t>(R_));
    int64_t remote = 0;
    for (int p = 0; p < R_; ++p) {
      sc[size_t(p)] = send_rows[size_t(p)] * width;
      rc[size_t(p)] = recv_rows[size_t(p)] * width;
      if (p != expert_->rank()) remote += sc[size_t(p)];
    }
    return metered(meter_, remote * int64_t(dtype_size(send.dtype())),
                   [&] { return expert_->all_to_all_v(recv, rc, send, sc); });
  }

  // The expert side's plan from the received counts (src-major (R, El)): groups of rows from rank 0,
  // 1, ... padded at the tail; recv_pos_[i] is the row of the i-th received row.
  void build_expert_plan(const int64_t* got) {
    int64_t* offset = ex_.plan.group_offset.data<int64_t>();        // (El+1)
    int64_t* live = ex_.plan.group_live.data<int64_t>();            // (El)
    int32_t* assignment = ex_.plan.row_assignment.data<int32_t>();  // (max_rows)
    float* weight = ex_.plan.row_weight.data<float>();              // (max_rows)
    const int64_t El = layout_.experts;
    offset[0] = 0;
    for (int64_t j = 0; j < El; ++j) {
      live[j] = 0;
      for (int src = 0; src < R_; ++src) live[j] += got[src * El + j];
      offset[j + 1] = offset[j] + round_up(live[j], tile_rows_);
    }
    std::vector<int64_t> fill(offset, offset + El);
    recv_pos_.clear();
    const float* w = weights_recv_.data<float>();
    for (int src = 0; src < R_; ++src)
      for (int64_t j = 0; j < El; ++j)
        for (int64_t k = 0; k < got[src * El + j]; ++k) {
          const int64_t row = fill[size_t(j)]++;
          weight[row] = w[recv_pos_.size()];
          assignment[row] = int32_t(recv_pos_.size());  // the arrival index: any id >= 0 marks it live
          recv_pos_.push_back(row);
        }
    int64_t live_rows = 0;
    for (int64_t j = 0; j < El; ++j) {
      live_rows += live[j];
      for (int64_t r = offset[j] + live[j]; r < offset[j + 1]; ++r) {
        assignment[r] = -1;
        weight[r] = 0;
      }
    }
    int64_t* stats = ex_.plan.stats.data<int64_t>();
    stats[0] = offset[El];
    stats[1] = live_rows;
    stats[2] = 0;
  }

  // rows (token side) -> staging in plan order -> all-to-all -> the expert side's groups.
  Status to_experts(Tensor& expert_rows, const Tensor& rows, Tensor& send, Tensor& recv) {
    const size_t row_bytes = size_t(H_) * dtype_size(rows.dtype());
    copy_rows(send.raw(), {}, rows.raw(), send_row_of_, int64_t(send_row_of_.size()), row_bytes);
    MOE_RETURN_IF_ERROR(exchange(recv, recv_rows_, send, send_rows_));
    copy_rows(expert_rows.raw(), recv_pos_, recv.raw(), {}, int64_t(recv_pos_.size()), row_bytes);
    zero_padding_rows(expert_rows, host_view(ex_.plan));
    return Status::ok();
  }

  // The expert side's rows -> staging in arrival order -> all-to-all back -> the token side's rows.
  Status from_experts(Tensor& rows, const DispatchPlan& plan, const Tensor& expert_rows, Tensor& send,
                      Tensor& recv) {
    const size_t row_bytes = size_t(H_) * dtype_size(rows.dtype());
    copy_rows(send.raw(), {}, expert_rows.raw(), recv_pos_, int64_t(recv_pos_.size()), row_bytes);
    MOE_RETURN_IF_ERROR(exchange(recv, send_rows_, send, recv_rows_));
    copy_rows(rows.raw(), send_row_of_, recv.raw(), {}, int64_t(send_row_of_.size()), row_bytes);
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
  ExpertRows ex_;
  Tensor send_, recv_;                          // (T_l*K, H), (T*K, H) run dtype: rows in flight
  Tensor send_f32_, recv_f32_;                  // the same in f32, for dx rows
  Tensor counts_send_, counts_recv_;            // (R * El) s64: live rows per (rank, local expert)
  Tensor weights_send_, weights_recv_;          // (T_l*K), (T*K) f32: the rows' combine weights
  std::vector<int64_t> send_rows_, recv_rows_;  // (R) rows to and from each rank
  std::vector<int64_t> send_row_of_;            // token-side row of each row sent, in order
  std::vector<int64_t> recv_pos_;               // expert-side row of each row received, in order
};

}  // namespace

std::unique_ptr<Exchange> make_all_to_all_exchange(const MoeConfig& cfg, Comm& world) {
  return std::make_unique<AllToAllExchange>(cfg, world);
}

}  // namespace moe
