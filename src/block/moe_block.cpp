#include <fmt/format.h>

#include <array>

#include "moe/block.h"

namespace moe {
namespace {

void check_supported(const Status& s) {
  MOE_CHECK(s.is_ok(), "MoeBlock made for an unsupported configuration: " + s.message());
}

// sum (f32) = part (f32, bf16 or f16) where first, else sum += part. Host tensors: --ep-overlap runs where
// its exchange does, on host memory.
void add_into_f32(Tensor& sum, const Tensor& part, bool first) {
  MOE_CHECK(sum.on_host() && part.on_host() && sum.dtype() == Dtype::f32 && sum.numel() == part.numel(),
            "add_into_f32: host tensors of one size, an f32 sum");
  float* s = sum.data<float>();  // (n)
  const int64_t n = sum.numel();
  if (part.dtype() == Dtype::f32) {
    const float* p = part.data<float>();  // (n)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) s[i] = first ? p[i] : s[i] + p[i];
  } else if (part.dtype() == Dtype::f16) {
    const f16_t* p = part.data<f16_t>();  // (n)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) s[i] = first ? f16_to_f32(p[i]) : s[i] + f16_to_f32(p[i]);
  } else {
    MOE_CHECK(part.dtype() == Dtype::bf16, "add_into_f32: an f32, bf16 or f16 part");
    const bf16_t* p = part.data<bf16_t>();  // (n)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) s[i] = first ? bf16_to_f32(p[i]) : s[i] + bf16_to_f32(p[i]);
  }
}

}  // namespace

MoeBlock::MoeBlock(const MoeConfig& cfg, Backend& backend, Comm& comm)
    : cfg_(cfg), backend_(backend), tracer_(&backend) {
  check_supported(exchange_supports(cfg_, comm));
  exchange_ = make_exchange(cfg_, comm);
  // The token side (pack, dispatch, combine) runs on the tokens and experts of this rank's plan, the
  // shared expert and the loss on the tokens it holds (fewer where it gathers them: split_); the expert
  // FFN on the experts it holds, sized for the rows it can receive.
  token_cfg_ = token_config(cfg_, exchange_->layout());
  held_cfg_ = rank_config(cfg_, exchange_->layout());
  expert_cfg_ = exchange_->expert_config();
  split_ = exchange_->gathers_tokens();
  check_supported(backend.supports_block(token_cfg_));
  check_supported(backend.supports_block(expert_cfg_));
  const int64_t tile_rows = layout_tile_rows(cfg_, backend_.kernel().gmm_tile_rows);
  const OpContext ctx{token_cfg_, backend_, tracer_, tile_rows};
  const OpContext held_ctx{held_cfg_, backend_, tracer_, tile_rows};
  const OpContext expert_ctx{expert_cfg_, backend_, tracer_, tile_rows};
  pack_ = backend.make_pack(ctx);
  dispatch_ = backend.make_dispatch(ctx);
  expert_ffn_ = backend.make_expert_ffn(expert_ctx);
  combine_ = backend.make_combine(ctx);
  if (cfg_.has_shared()) shared_ = backend.make_shared_expert(held_ctx);
  // --ep-overlap in forward_backward: each chunk's forward keeps its activations for its own backward,
  // so each chunk has an op of its own, and the chunks' routed weight gradients are summed in f32.
  const size_t chunks = exchange_->overlaps_expert_ffn() ? size_t(cfg_.ep_overlap) : 1;
  chunk_rows_.assign(chunks, nullptr);
  if (chunks > 1 && cfg_.bench_pass == BenchPass::forward_backward) {
    for (size_t c = 1; c < chunks; ++c) chunk_ffns_.push_back(backend.make_expert_ffn(expert_ctx));
    const int64_t E = expert_cfg_.experts, H = cfg_.hidden, M = cfg_.mlp_dim;
    auto grads_of = [&](Dtype dt) {
      return FfnWeightGrads{backend.empty(dt, {E, H, M}), backend.empty(dt, {E, H, M}),
                            backend.empty(dt, {E, M, H})};
    };
    chunk_grads_ = grads_of(cfg_.dtype);
    chunk_grad_sum_ = grads_of(Dtype::f32);
  }

  const int64_t T = token_cfg_.tokens, T_held = held_cfg_.tokens, H = cfg_.hidden;
  plan_ = allocate_plan(token_cfg_, tile_rows, backend.memory());
  x_rows_ = backend.empty(cfg_.dtype, {plan_.max_rows, H});
  y_rows_ = backend.empty(cfg_.dtype, {plan_.max_rows, H});
  out_acc_ = backend.empty(Dtype::f32, {T, H});
  if (split_) {
    x_all_ = backend.empty(cfg_.dtype, {T, H});
    held_acc_ = backend.empty(Dtype::f32, {T_held, H});
  }
  if (cfg_.bench_pass == BenchPass::forward_backward) {
    dy_ = backend.empty(Dtype::f32, {T_held, H});
    if (split_) {
      dy_all_ = backend.empty(Dtype::f32, {T, H});
      dx_held_ = backend.empty(Dtype::f32, {T_held, H});
    }
    dy_rows_ = backend.empty(cfg_.dtype, {plan_.max_rows, H});
    dx_rows_ = backend.empty(Dtype::f32, {plan_.max_rows, H});
    dx_acc_ = backend.empty(Dtype::f32, {T, H});
    sum_sq_ = backend.empty(Dtype::f64, {1});
  }
  ex_ = exchange_->expert_rows(ExpertRows{plan_, x_rows_, y_rows_, dy_rows_, dx_rows_}, backend, tile_rows);
}

FfnWeights MoeBlock::routed_weights(const MoeInputs& in, bool prebuilt_w13) const {
  return FfnWeights{in.w1, in.w3, in.w2, prebuilt_w13 ? in.w13 : Tensor(), in.q13, in.q1, in.q3, in.q2};
}

FfnWeights MoeBlock::shared_weights(const MoeInputs& in, bool prebuilt_w13) const {
  return FfnWeights{in.sw1, in.sw3, in.sw2, prebuilt_w13 ? in.sw13 : Tensor(),
                    {},     {},     {},     {}};  // no pre-quantized shared weights
}

Status MoeBlock::pack_and_dispatch(const MoeInputs& in, const RoutingTensors& routing) {
  tracer_("pack", [&] { pack_->forward(plan_, routing); });
  MOE_RETURN_IF_ERROR(traced("exchange_plan", [&] { return exchange_->after_plan(plan_); }));
  if (split_)
    MOE_RETURN_IF_ERROR(traced("exchange_gather_x", [&] { return exchange_->gather_tokens(in.x, x_all_); }));
  tracer_("dispatch", [&] { dispatch_->forward(x_rows_, split_ ? x_all_ : in.x, plan_); });
  return Status::ok();
}

// prebuilt_w13: the forward pass reads the w13 = [w1|w3] built outside the timed call (as the seed's
// forward does); forward_backward builds it inside, in the op.
Status MoeBlock::experts_and_combine(Tensor& out, const MoeInputs& in, const RoutingTensors& routing,
                                     bool prebuilt_w13) {
  const FfnWeights w = routed_weights(in, prebuilt_w13);
  exchange_->count_call();
  if (exchange_->overlaps_expert_ffn()) {
    // --ep-overlap: the exchange runs the experts on each chunk of rows as it arrives.
    MOE_RETURN_IF_ERROR(
        exchange_->overlapped_expert_ffn(x_rows_, y_rows_, plan_, tracer_, [&](size_t c, ExpertRows& chunk) {
          chunk_rows_[c] = &chunk;
          ExpertFfnOp& ffn = chunk_ffn(c);
          tracer_("up", [&] { ffn.up(chunk.x_rows, w, chunk.plan); });
          tracer_("down", [&] { ffn.down(chunk.y_rows, w, chunk.plan); });
        }));
  } else {
    MOE_RETURN_IF_ERROR(
        traced("exchange_dispatch", [&] { return exchange_->before_expert_ffn(x_rows_, plan_); }));
    tracer_("up", [&] { expert_ffn_->up(ex_.x_rows, w, ex_.plan); });
    tracer_("down", [&] { expert_ffn_->down(ex_.y_rows, w, ex_.plan); });
    MOE_RETURN_IF_ERROR(
        traced("exchange_combine", [&] { return exchange_->after_expert_ffn(y_rows_, plan_); }));
  }
  if (split_) {
    // Every token's routed sums here, this rank's slice of their sum over ranks plus its shared part there.
    if (shared_)
      tracer_("shared", [&] { shared_->forward(held_acc_, in.x, shared_weights(in, prebuilt_w13)); });
    tracer_("combine", [&] { combine_->forward({out_acc_, out_acc_, false}, y_rows_, plan_, routing); });
    MOE_RETURN_IF_ERROR(traced("exchange_output", [&] {
      return exchange_->scatter_tokens(out_acc_, held_acc_, shared_ != nullptr);
    }));
    tracer_("output", [&] { backend_.convert(out, held_acc_); });
    return Status::ok();
  }
  if (shared_) tracer_("shared", [&] { shared_->forward(out_acc_, in.x, shared_weights(in, prebuilt_w13)); });
  const bool summed_across_ranks = exchange_->sums_combined_output();
  Tensor& combined = summed_across_ranks ? out_acc_ : out;
  const bool with_shared = shared_ != nullptr && exchange_->adds_shared();
  tracer_("combine", [&] { combine_->forward({combined, out_acc_, with_shared}, y_rows_, plan_, routing); });
  if (!summed_across_ranks) return Status::ok();
  MOE_RETURN_IF_ERROR(traced("exchange_output", [&] { return exchange_->after_combine(out_acc_); }));
  tracer_("output", [&] { backend_.convert(out, out_acc_); });
  return Status::ok();
}

Status MoeBlock::forward(Tensor& out, const MoeInputs& in, const RoutingTensors& routing) {
  MOE_RETURN_IF_ERROR(pack_and_dispatch(in, routing));
  return experts_and_combine(out, in, routing, /*prebuilt_w13=*/true);
}

Status MoeBlock::prepare_dispatch(const MoeInputs& in, const RoutingTensors& routing) {
  return pack_and_dispatch(in, routing);
}

Status MoeBlock::forward_prepared(Tensor& out, const MoeInputs& in, const RoutingTensors& routing) {
  return experts_and_combine(out, in, routing, /*prebuilt_w13=*/true);
}

Status MoeBlock::forward_backward(Tensor& out, MoeGrads& grads, const MoeInputs& in,
                                  const RoutingTensors& routing) {
  MOE_CHECK(cfg_.bench_pass == BenchPass::forward_backward, "forward_backward on a block made for forward");
  MOE_RETURN_IF_ERROR(pack_and_dispatch(in, routing));
  MOE_RETURN_IF_ERROR(experts_and_combine(out, in, routing, /*prebuilt_w13=*/false));
  // The mean over the global (T, H): a rank holding a slice of the tokens contributes its share.
  tracer_("loss", [&] { backend_.loss_backward(dy_, sum_sq_, out, cfg_.tokens * cfg_.hidden); });

  FfnWeightGrads shared_grads{grads.dsw1, grads.dsw3, grads.dsw2};
  Tensor& shared_dx = split_ ? dx_held_ : dx_acc_;
  if (shared_)
    tracer_("shared_backward",
            [&] { shared_->backward(shared_dx, shared_grads, dy_, in.x, shared_weights(in, false)); });
  if (split_)
    MOE_RETURN_IF_ERROR(traced("exchange_gather_dy", [&] { return exchange_->gather_tokens(dy_, dy_all_); }));
  tracer_("combine_backward", [&] { combine_->backward(dy_rows_, split_ ? dy_all_ : dy_, plan_, routing); });
  FfnWeightGrads routed_grads{grads.dw1, grads.dw3, grads.dw2};
  if (!chunk_ffns_.empty()) {
    MOE_RETURN_IF_ERROR(overlapped_expert_backward(routed_grads, in));
  } else {
    MOE_RETURN_IF_ERROR(
        traced("exchange_dy_rows", [&] { return exchange_->before_expert_ffn_backward(dy_rows_, plan_); }));
    tracer_("expert_ffn_backward", [&] {
      expert_ffn_->backward(ex_.dx_rows, routed_grads, ex_.dy_rows, ex_.x_rows, routed_weights(in, false),
                            ex_.plan);
    });
    MOE_RETURN_IF_ERROR(
        traced("exchange_dx_rows", [&] { return exchange_->after_expert_ffn_backward(dx_rows_, plan_); }));
  }
  const bool dx_summed_across_ranks = exchange_->sums_input_grad();
  Tensor& dx = dx_summed_across_ranks || split_ ? dx_acc_ : grads.dx;
  const bool with_shared = shared_ != nullptr && exchange_->adds_shared() && !split_;
  tracer_("dispatch_backward", [&] { dispatch_->backward({dx, dx_acc_, with_shared}, dx_rows_, plan_); });
  if (split_) {
    MOE_RETURN_IF_ERROR(traced(
        "exchange_dx", [&] { return exchange_->scatter_tokens(dx_acc_, dx_held_, shared_ != nullptr); }));
    tracer_("dx", [&] { backend_.convert(grads.dx, dx_held_); });
  } else if (dx_summed_across_ranks) {
    MOE_RETURN_IF_ERROR(traced("exchange_dx", [&] { return exchange_->reduce_input_grad(dx_acc_); }));
    tracer_("dx", [&] { backend_.convert(grads.dx, dx_acc_); });
  }
  std::vector<Tensor*> weight_grads = {&grads.dw1, &grads.dw3, &grads.dw2};
  if (shared_) weight_grads.insert(weight_grads.end(), {&grads.dsw1, &grads.dsw3, &grads.dsw2});
  return traced("exchange_weight_grads", [&] { return exchange_->reduce_weight_grads(weight_grads); });
}

// Chunk c's backward on the rows and plan its forward kept, by the op that ran that forward; its
// weight gradients (run dtype) are summed over the chunks in f32 and rounded once into `grads`.
Status MoeBlock::overlapped_expert_backward(FfnWeightGrads& grads, const MoeInputs& in) {
  const FfnWeights w = routed_weights(in, false);
  const std::array<std::pair<Tensor*, Tensor*>, 3> parts = {{{&chunk_grads_.dw1, &chunk_grad_sum_.dw1},
                                                             {&chunk_grads_.dw3, &chunk_grad_sum_.dw3},
                                                             {&chunk_grads_.dw2, &chunk_grad_sum_.dw2}}};
  MOE_RETURN_IF_ERROR(exchange_->overlapped_expert_ffn_backward(
      dy_rows_, dx_rows_, plan_, tracer_, [&](size_t c, ExpertRows& chunk) {
        tracer_("expert_ffn_backward", [&] {
          chunk_ffn(c).backward(chunk.dx_rows, chunk_grads_, chunk.dy_rows, chunk.x_rows, w, chunk.plan);
        });
        tracer_("expert_grads_sum", [&] {
          for (const auto& [part, sum] : parts) add_into_f32(*sum, *part, /*first=*/c == 0);
        });
      }));
  tracer_("expert_grads_sum", [&] {
    backend_.convert(grads.dw1, chunk_grad_sum_.dw1);
    backend_.convert(grads.dw3, chunk_grad_sum_.dw3);
    backend_.convert(grads.dw2, chunk_grad_sum_.dw2);
  });
  return Status::ok();
}

ExpertFfnOp& MoeBlock::chunk_ffn(size_t c) const {
  return c == 0 || chunk_ffns_.empty() ? *expert_ffn_ : *chunk_ffns_[c - 1];
}

double MoeBlock::loss() const {
  MOE_CHECK(!sum_sq_.empty(), "loss() of a block made for forward");
  return sum_sq_.to_host().get(0) / double(held_cfg_.tokens * cfg_.hidden);
}

template <typename Fn>
Status MoeBlock::traced(const char* stage, Fn&& hook) {
  Status s;
  tracer_(stage, [&] { s = hook(); });
  return s;
}

void MoeBlock::stage_pack_dispatch(const MoeInputs& in, const RoutingTensors& routing) {
  MOE_CHECK(pack_and_dispatch(in, routing).is_ok(), "stage timing runs on one rank");
}

void MoeBlock::stage_up(const MoeInputs& in) {
  expert_ffn_->up(x_rows_, routed_weights(in, true), plan_);
}

void MoeBlock::stage_down(const MoeInputs& in) {
  expert_ffn_->down(y_rows_, routed_weights(in, true), plan_);
}

void MoeBlock::stage_combine(Tensor& out, const RoutingTensors& routing) {
  combine_->forward({out, out_acc_, /*acc_holds_start=*/false}, y_rows_, plan_, routing);
}

PlanStats MoeBlock::plan_stats() const {
  return moe::plan_stats(plan_);
}

int64_t MoeBlock::saved_activation_bytes() const {
  if (cfg_.bench_pass == BenchPass::forward) return 0;  // nothing is kept for a backward
  const PlanStats s = plan_stats();
  const int64_t es = int64_t(dtype_size(cfg_.dtype));
  int64_t bytes = s.rows * cfg_.hidden * es;  // dispatched rows: the expert MLP's input
  // Where rows move (all_to_all), the expert side keeps the rows it received as well.
  if (chunk_ffns_.empty()) {
    const PlanStats xs = moe::plan_stats(ex_.plan);
    if (!ex_.x_rows.same_storage(x_rows_)) bytes += xs.rows * cfg_.hidden * es;
    bytes += expert_ffn_->saved_bytes(xs.rows);
  } else {
    // --ep-overlap: every chunk keeps the rows it received and its op's intermediates.
    for (size_t c = 0; c < chunk_rows_.size(); ++c) {
      if (chunk_rows_[c] == nullptr) continue;  // no call yet
      const int64_t rows = moe::plan_stats(chunk_rows_[c]->plan).rows;
      bytes += rows * cfg_.hidden * es + chunk_ffn(c).saved_bytes(rows);
    }
  }
  if (shared_) bytes += shared_->saved_bytes();
  // The plan: row_assignment and row_weight per row, assignment_row per assignment, group offsets and
  // live counts.
  bytes += s.rows * 8 + token_cfg_.assignments() * 4 + (2 * token_cfg_.experts + 1) * 8;
  return bytes;
}

}  // namespace moe
