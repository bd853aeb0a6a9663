// impl ref_dp's expert MLP: the seed's DP baseline (spec §5.5, bench_moe_mlp_profile.py `ref_dp`) as
// it computes, waste included, so the tool can put it beside our DP and DP x EP. Per call:
//   - the plan (kRefDpBlockRows = 256 rows per block) is its padded sort: every expert group rounded up
//     to whole blocks, in a buffer of the static ref_dp_blocks(cfg) blocks (A + 256 E rows rounded up);
//   - per-block weight copies w[block_expert] (blocks, H, M) / (blocks, M, H), one per block, as its
//     gather does (blocks past the last group take expert E-1: any expert costs the same);
//   - silu(x @ w1) * (x @ w3) @ w2 over every row of every block, the groups' padding rows and the
//     trailing blocks' zero rows included, accumulated in float32 (the grouped GEMMs with one "expert"
//     per block and every row live).
// The combine (scatter impl) then multiplies by the routing weights and scatter-adds, as the seed does.
// The backward is what JAX's autodiff of that forward computes (the seed's logbook 003 timed it):
//   - the einsums' transposes over every row of every block, one "expert" per block again: dw2 per
//     block = g_b^T @ dy_b, dg = dy @ w2_b^T, SwiGLU's backward, dw1 / dw3 per block = x_b^T @ da_b /
//     db_b, dx_b = da_b @ w1_b^T + db_b @ w3_b^T; the trailing blocks take zero cotangent rows (their
//     gradients are zero, their GEMMs cost what any block's do);
//   - per-block weight gradients (blocks, H, M) / (blocks, M, H) in the run dtype (the cotangent of a
//     run-dtype copy), then the gather's transpose: a segment sum into each expert's dw (float32 sums
//     stored once; an expert with no block gets zeros, E-1 also sums the trailing blocks' zeros).
// No remat mode (MoeConfig::validate refuses all but none): the forward keeps h, g and the weight copies.
// Reference: src/ref/expert_ffn.cpp (the same rows, without the waste: padding rows are zeros either way).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/ops/expert_ffn.h"
#include "cpu/ops/swiglu.h"
#include "cpu/ops/vec_math.h"
#include "moe/backend.h"

namespace moe::cpu {
namespace {

char* at(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}
const char* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}

class RefDpExpertFfn final : public ExpertFfnOp {
 public:
  RefDpExpertFfn(const OpContext& ctx, GemmKernels& gemm)
      : gemm_(gemm),
        tracer_(ctx.tracer),
        dt_(ctx.cfg.dtype),
        H_(ctx.cfg.hidden),
        M_(ctx.cfg.mlp_dim),
        E_(ctx.cfg.experts),
        blocks_(ref_dp_blocks(ctx.cfg)) {
    MOE_CHECK(ctx.tile_rows == kRefDpBlockRows, "ref_dp: the plan must be laid out in 256-row blocks");
    MOE_CHECK(max_plan_rows(ctx.cfg, ctx.tile_rows) == blocks_ * kRefDpBlockRows,
              "ref_dp: the row buffers must hold every static block");
    Backend& be = ctx.backend;
    const int64_t rows = blocks_ * kRefDpBlockRows;
    w1_blocks_ = be.empty(dt_, {blocks_, H_, M_});
    w3_blocks_ = be.empty(dt_, {blocks_, H_, M_});
    w2_blocks_ = be.empty(dt_, {blocks_, M_, H_});
    h_ = be.empty(dt_, {2, rows, M_});
    g_ = be.empty(dt_, {rows, M_});
    // The trailing blocks' rows: ref_dp_blocks = ceil(A / 256) + E, and the groups take at least
    // ceil(A / 256) blocks, so at most E blocks trail.
    zero_rows_ = be.empty(dt_, {E_ * kRefDpBlockRows, H_});
    std::memset(zero_rows_.raw(), 0, size_t(zero_rows_.numel()) * dtype_size(dt_));
    block_offset_.resize(size_t(blocks_ + 1));
    for (int64_t b = 0; b <= blocks_; ++b) block_offset_[size_t(b)] = b * kRefDpBlockRows;
    block_expert_.resize(size_t(blocks_));
    expert_block_.resize(size_t(E_ + 1));
    if (ctx.cfg.bench_pass == BenchPass::forward_backward) {
      dw1_blocks_ = be.empty(dt_, {blocks_, H_, M_});
      dw3_blocks_ = be.empty(dt_, {blocks_, H_, M_});
      dw2_blocks_ = be.empty(dt_, {blocks_, M_, H_});
      dh_ = be.empty(dt_, {2, rows, M_});
      dg_ = be.empty(dt_, {rows, M_});
    }
  }

  void up(const Tensor& x_rows, const FfnWeights& w, const DispatchPlan& plan) override {
    used_ = assign_blocks(host_view(plan));
    tracer_("ref_dp_weight_copies", [&] {
      copy_blocks(w1_blocks_, w.w1, H_ * M_);
      copy_blocks(w3_blocks_, w.w3, H_ * M_);
    });
    const int64_t rows = blocks_ * kRefDpBlockRows;
    for (int part = 0; part < 2; ++part) {
      Tensor& wb = part == 0 ? w1_blocks_ : w3_blocks_;
      char* h = at(h_, part * rows * M_);
      // The groups' blocks read the dispatched rows, the trailing blocks zero rows: the same products.
      gemm_.nn(h, dt_, x_rows.raw(), ExpertWeights(wb.raw()), dt_, blocks(used_), H_, M_);
      if (used_ < blocks_)
        gemm_.nn(h + size_t(used_ * kRefDpBlockRows * M_) * dtype_size(dt_), dt_, zero_rows_.raw(),
                 ExpertWeights(at(wb, used_ * H_ * M_)), dt_, blocks(blocks_ - used_), H_, M_);
    }
    swiglu_forward(g_.raw(), dt_, GateUp{h_.raw(), at(h_, rows * M_), M_}, dt_, rows, M_, nullptr);
  }

  // y_rows (blocks * 256, H): every block's rows, the trailing ones too (nothing reads them).
  void down(Tensor& y_rows, const FfnWeights& w, const DispatchPlan&) override {
    tracer_("ref_dp_weight_copies", [&] { copy_blocks(w2_blocks_, w.w2, M_ * H_); });
    gemm_.nn(y_rows.raw(), dt_, g_.raw(), ExpertWeights(w2_blocks_.raw()), dt_, blocks(blocks_), M_, H_);
  }

  // REQUIRES: up and down ran on the same plan and weights (their h, g and weight copies are read).
  // dx_rows (blocks * 256, H) f32: every block's rows, the trailing ones too (nothing reads them).
  void backward(Tensor& dx_rows, FfnWeightGrads& dw, const Tensor& dy_rows, const Tensor& x_rows,
                const FfnWeights&, const DispatchPlan&) override {
    MOE_CHECK(!dg_.empty(), "ref_dp: backward of an op made for forward");
    const int64_t rows = blocks_ * kRefDpBlockRows, trail = blocks_ - used_;
    const int64_t used_rows = used_ * kRefDpBlockRows;
    char* da = at(dh_, 0);
    char* db = at(dh_, rows * M_);
    // The trailing blocks' cotangent rows are zeros (nothing reads their outputs), their inputs too.
    tracer_("down_backward", [&] {
      gemm_.tn(dw2_blocks_.raw(), dt_, g_.raw(), dy_rows.raw(), dt_, blocks(used_), M_, H_, H_);
      gemm_.nt(dg_.raw(), dt_, dy_rows.raw(), ExpertWeights(w2_blocks_.raw()), dt_, blocks(used_), M_, H_);
      if (trail > 0) {
        gemm_.tn(at(dw2_blocks_, used_ * M_ * H_), dt_, at(g_, used_rows * M_), zero_rows_.raw(), dt_,
                 blocks(trail), M_, H_, H_);
        gemm_.nt(at(dg_, used_rows * M_), dt_, zero_rows_.raw(),
                 ExpertWeights(at(w2_blocks_, used_ * M_ * H_)), dt_, blocks(trail), M_, H_);
      }
    });
    tracer_("swiglu_backward", [&] {
      swiglu_backward(GateUpGrad{da, db, M_}, dt_, dg_.raw(), GateUp{h_.raw(), at(h_, rows * M_), M_}, dt_,
                      rows, M_, nullptr);
    });
    tracer_("up_backward", [&] {
      gemm_.tn_pair(dw1_blocks_.raw(), dw3_blocks_.raw(), dt_, x_rows.raw(), da, db, dt_, blocks(used_), H_,
                    M_, M_);
      if (trail > 0) {
        const size_t off = size_t(used_rows * M_) * dtype_size(dt_);
        gemm_.tn_pair(at(dw1_blocks_, used_ * H_ * M_), at(dw3_blocks_, used_ * H_ * M_), dt_,
                      zero_rows_.raw(), da + off, db + off, dt_, blocks(trail), H_, M_, M_);
      }
      gemm_.nt(dx_rows.raw(), Dtype::f32, da, ExpertWeights(w1_blocks_.raw()), dt_, blocks(blocks_), H_, M_);
      gemm_.nt(dx_rows.raw(), Dtype::f32, db, ExpertWeights(w3_blocks_.raw()), dt_, blocks(blocks_), H_, M_,
               /*accumulate=*/true);
    });
    tracer_("ref_dp_weight_grad_sums", [&] {
      segment_sum(dw.dw1, dw1_blocks_, H_ * M_);
      segment_sum(dw.dw3, dw3_blocks_, H_ * M_);
      segment_sum(dw.dw2, dw2_blocks_, M_ * H_);
    });
  }

  // What the backward reads of the forward: h and g over every static row, and the weight copies.
  int64_t saved_bytes(int64_t) const override {
    return (blocks_ * kRefDpBlockRows * 3 * M_ + 3 * blocks_ * H_ * M_) * int64_t(dtype_size(dt_));
  }

 private:
  // The first `n` blocks as groups of 256 rows, every row live (padding rows are multiplied).
  GroupedShape blocks(int64_t n) const { return GroupedShape{block_offset_.data(), n, nullptr, false}; }

  // block_expert_ from the plan's groups (each a whole number of blocks); the blocks past them take
  // expert E-1. Returns the blocks the groups use.
  int64_t assign_blocks(const HostPlan& p) {
    int64_t b = 0;
    for (int64_t e = 0; e < E_; ++e) {
      MOE_CHECK(p.group_offset[e] % kRefDpBlockRows == 0, "ref_dp: a group does not start a block");
      expert_block_[size_t(e)] = b;
      for (; b * kRefDpBlockRows < p.group_offset[e + 1]; ++b) block_expert_[size_t(b)] = int32_t(e);
    }
    MOE_CHECK(b <= blocks_ && blocks_ - b <= E_, "ref_dp: the groups take more blocks than the static count");
    const int64_t used = b;
    for (; b < blocks_; ++b) block_expert_[size_t(b)] = int32_t(E_ - 1);
    expert_block_[size_t(E_)] = blocks_;
    return used;
  }

  // dw[e] = sum of src[b] over e's blocks [expert_block_[e], expert_block_[e+1]), `per` elements each:
  // the transpose of the w[block_expert] gather. Summed in float32, stored once in the run dtype.
  void segment_sum(Tensor& dw, const Tensor& src, int64_t per) {
    if (dt_ == Dtype::f32)
      segment_sum_as(dw.data<float>(), src.data<float>(), per);
    else if (dt_ == Dtype::f16)
      segment_sum_as(dw.data<f16_t>(), src.data<f16_t>(), per);
    else
      segment_sum_as(dw.data<bf16_t>(), src.data<bf16_t>(), per);
  }
  template <typename T>
  void segment_sum_as(T* dw, const T* src, int64_t per) {
    constexpr int64_t kChunk = 1024;
    const int64_t chunks = (per + kChunk - 1) / kChunk;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t e = 0; e < E_; ++e)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i0 = c * kChunk, n = std::min(kChunk, per - i0);
        float acc[kChunk] = {};
        for (int64_t b = expert_block_[size_t(e)]; b < expert_block_[size_t(e) + 1]; ++b) {
          const T* s = src + b * per + i0;
          for (int64_t i = 0; i < n; ++i) acc[i] += widen(s[i]);
        }
        T* d = dw + e * per + i0;
        for (int64_t i = 0; i < n; ++i) d[i] = store<T>(acc[i]);
      }
  }
  template <typename T>
  static T store(float v) {
    if constexpr (std::is_same_v<T, float>)
      return v;
    else if constexpr (std::is_same_v<T, f16_t>)
      return f32_to_f16(v);
    else
      return f32_to_bf16(v);
  }

  // dst[b] = src[block_expert_[b]], `per` elements each: the seed's w[block_expert] gather.
  void copy_blocks(Tensor& dst, const Tensor& src, int64_t per) {
    const size_t bytes = size_t(per) * dtype_size(dt_);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks_; ++b)
      std::memcpy(at(dst, b * per), at(src, int64_t(block_expert_[size_t(b)]) * per), bytes);
  }

  GemmKernels& gemm_;  // the cpu backend's kernel table for this op's KernelConfig
  const StageTracer& tracer_;
  Dtype dt_;
  int64_t H_, M_, E_, blocks_;
  int64_t used_ = 0;                   // blocks the plan's groups take (the rest trail)
  Tensor w1_blocks_, w3_blocks_;       // (blocks, H, M) per-block copies of w1, w3
  Tensor w2_blocks_;                   // (blocks, M, H) per-block copies of w2
  Tensor h_;                           // (2, blocks * 256, M) gate and up planes
  Tensor g_;                           // (blocks * 256, M) SwiGLU output
  Tensor zero_rows_;                   // (E * 256, H) the trailing blocks' rows
  std::vector<int64_t> block_offset_;  // (blocks + 1) b * 256
  std::vector<int32_t> block_expert_;  // (blocks) the expert whose weights block b multiplies
  std::vector<int64_t> expert_block_;  // (E + 1) expert e's blocks are [e, e+1); E-1's run to the end
  // forward_backward only:
  Tensor dw1_blocks_, dw3_blocks_;  // (blocks, H, M) per-block gradients of the w1, w3 copies
  Tensor dw2_blocks_;               // (blocks, M, H) per-block gradients of the w2 copies
  Tensor dh_;                       // (2, blocks * 256, M) gate and up gradient planes
  Tensor dg_;                       // (blocks * 256, M) the SwiGLU output's gradient
};

}  // namespace

std::unique_ptr<ExpertFfnOp> make_ref_dp_expert_ffn(const OpContext& ctx, GemmKernels& gemm) {
  return std::make_unique<RefDpExpertFfn>(ctx, gemm);
}

}  // namespace moe::cpu
