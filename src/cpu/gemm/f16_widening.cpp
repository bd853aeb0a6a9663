#include "cpu/gemm/f16_widening.h"

#include <cstring>

#include "cpu/ops/swiglu.h"
#include "cpu/ops/vec_math.h"
#include "moe/quantize.h"
#include "moe/tensor.h"

namespace moe::f16_widening {
namespace {

// Rows of a grouped call's row buffers (the last group's end).
int64_t total_rows(GroupedShape g) {
  return g.group_offset[g.experts];
}

// An operand as the float32 forms read it: itself unless it is float16, else a float32 copy it owns.
// rows (rows, cols) with rows ld apart are copied to ld = cols (a column slice is read where it lies).
class Wide {
 public:
  Wide(const void* p, Dtype dt, int64_t n) : Wide(p, dt, 1, n, n) {}
  Wide(const void* p, Dtype dt, int64_t rows, int64_t cols, int64_t ld) : p_(p), dt_(dt), ld_(ld) {
    if (dt != Dtype::f16) return;
    buf_ = Buffer<float>(size_t(rows * cols));
    float* dst = buf_.data();  // (rows, cols)
    const auto* src = static_cast<const f16_t*>(p);
    if (ld == cols) {
      cpu::convert_elements(dst, Dtype::f32, src, Dtype::f16, rows * cols);
    } else {
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t(1) << 15))
      for (int64_t r = 0; r < rows; ++r) cpu::f16_to_f32_row(dst + r * cols, src + r * ld, cols);
    }
    p_ = dst;
    dt_ = Dtype::f32;
    ld_ = cols;
  }
  const void* get() const {
    return p_;
  }
  Dtype dtype() const {
    return dt_;
  }
  int64_t ld() const {
    return ld_;
  }

 private:
  const void* p_;
  Dtype dt_;
  int64_t ld_;
  Buffer<float> buf_;
};

// ExpertWeights (E, Kd, N) as parts of (E, Kd, N / parts) each, widened part by part.
class WideWeights {
 public:
  WideWeights(ExpertWeights w, Dtype dt, int64_t E, int64_t Kd, int64_t N)
      : first_(w.first, dt, E * Kd * (N / w.parts())),
        second_(w.second, w.second ? dt : Dtype::f32, w.second ? E * Kd * (N / w.parts()) : 0) {}
  ExpertWeights get() const {
    return second_.get() ? ExpertWeights(first_.get(), second_.get()) : ExpertWeights(first_.get());
  }

 private:
  Wide first_, second_;
};

// Where a form writes an output of `dt`: out itself unless it is float16, else float32 scratch that
// finish() rounds into out (nearest even; past 65504 is inf, which the harness refuses as non-finite).
class WideOut {
 public:
  WideOut(void* out, Dtype dt, int64_t n) : out_(out), p_(out), dt_(dt), n_(n) {
    if (dt != Dtype::f16) return;
    buf_ = Buffer<float>(size_t(n));
    p_ = buf_.data();
  }
  void* get() { return p_; }
  Dtype dtype() const { return dt_ == Dtype::f16 ? Dtype::f32 : dt_; }
  void finish() {
    if (dt_ == Dtype::f16) cpu::convert_elements(out_, Dtype::f16, buf_.data(), Dtype::f32, n_);
  }

 private:
  void* out_;
  void* p_;
  Dtype dt_;
  int64_t n_;
  Buffer<float> buf_;
};

// fn(row_begin, row_end) over each group's padding rows.
template <typename Fn>
void for_padding(GroupedShape g, Fn&& fn) {
  if (!g.live_rows) return;
  for (int64_t e = 0; e < g.experts; ++e)
    if (g.group_offset[e] + g.live_rows[e] < g.group_offset[e + 1])
      fn(g.group_offset[e] + g.live_rows[e], g.group_offset[e + 1]);
}

// Zeros the padding rows of a (rows, width) float16 buffer: an epilogue run over every row may have
// written a padding row's routing weight (not necessarily finite) times zero there.
void zero_padding(void* p, int64_t width, GroupedShape g) {
  for_padding(g, [&](int64_t r0, int64_t r1) {
    std::memset(static_cast<f16_t*>(p) + r0 * width, 0, size_t((r1 - r0) * width) * sizeof(f16_t));
  });
}

// [gate | up] halves of a (rows, 2M) float16 buffer.
cpu::GateUp halves(const void* h, int64_t M) {
  return {h, static_cast<const f16_t*>(h) + M, 2 * M};
}

}  // namespace

void nn(GemmKernels& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N) {
  const int64_t R = total_rows(groups);
  const Wide a(lhs, in_dtype, R * Kd);                        // lhs (R, Kd)
  const WideWeights w(rhs, in_dtype, groups.experts, Kd, N);  // rhs (E, Kd, N)
  WideOut o(out, out_dtype, R * N);                           // out (R, N)
  // finish() rounds every row of a float32 scratch into out: its padding rows must be written as zeros.
  if (out_dtype == Dtype::f16) groups.padding_kept = false;
  k.nn(o.get(), o.dtype(), a.get(), w.get(), a.dtype(), groups, Kd, N);
  o.finish();
}

void nn_swiglu(GemmKernels& k, void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
               Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight,
               bool keep_h) {
  if (out_dtype != Dtype::f16) {  // float16 inputs only: the float32 form computes g from its own h
    const Wide a(lhs, in_dtype, total_rows(groups) * Kd);
    const WideWeights w(rhs, in_dtype, groups.experts, Kd, 2 * M);
    return k.nn_swiglu(h, g, out_dtype, a.get(), w.get(), a.dtype(), groups, Kd, M, row_weight, keep_h);
  }
  nn(k, h, out_dtype, lhs, rhs, in_dtype, groups, Kd, 2 * M);  // h (R, 2M) rounded to float16
  cpu::swiglu_forward(g, Dtype::f16, halves(h, M), Dtype::f16, total_rows(groups), M, row_weight);
  zero_padding(g, M, groups);
}

void nt(GemmKernels& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  const int64_t R = total_rows(groups);
  const Wide d(dout, in_dtype, R * N);                        // dout (R, N)
  const WideWeights w(rhs, in_dtype, groups.experts, Kd, N);  // rhs (E, Kd, N)
  WideOut o(out, out_dtype, R * Kd);                          // out (R, Kd); accumulating ones are float32
  if (out_dtype == Dtype::f16) groups.padding_kept = false;  // as nn: finish() rounds the scratch's every row
  k.nt(o.get(), o.dtype(), d.get(), w.get(), d.dtype(), groups, Kd, N, accumulate);
  o.finish();
}

void nt_swiglu_grad(GemmKernels& k, void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h,
                    Dtype dtype, GroupedShape groups, int64_t M, int64_t N, const float* row_weight) {
  MOE_CHECK(dtype == Dtype::f16, "nt_swiglu_grad: one dtype throughout");
  nt(k, dg, dtype, dout, rhs, dtype, groups, M, N, /*accumulate=*/false);  // dg (R, M) rounded to float16
  const cpu::GateUp in = halves(h, M);
  cpu::swiglu_backward({dh, static_cast<f16_t*>(dh) + M, 2 * M}, dtype, dg, in, dtype, total_rows(groups), M,
                       row_weight);
  zero_padding(dh, 2 * M, groups);
}

void tn(GemmKernels& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  const int64_t R = total_rows(groups);
  const Wide a(lhs, in_dtype, R * Kd);                  // lhs (R, Kd)
  const Wide d(dout, in_dtype, R, N, ld_dout);          // dout (R, N), ld_dout apart
  WideOut o(drhs, out_dtype, groups.experts * Kd * N);  // drhs (E, Kd, N)
  k.tn(o.get(), o.dtype(), a.get(), d.get(), a.dtype(), groups, Kd, N, d.ld());
  o.finish();
}

void tn_pair(GemmKernels& k, void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
             const void* dout_first, const void* dout_second, Dtype in_dtype, GroupedShape groups, int64_t Kd,
             int64_t N, int64_t ld_dout) {
  const int64_t R = total_rows(groups), n = groups.experts * Kd * N;
  const Wide a(lhs, in_dtype, R * Kd);  // lhs (R, Kd)
  const Wide d1(dout_first, in_dtype, R, N, ld_dout), d3(dout_second, in_dtype, R, N, ld_dout);  // (R, N)
  WideOut o1(drhs_first, out_dtype, n), o3(drhs_second, out_dtype, n);  // (E, Kd, N) each
  k.tn_pair(o1.get(), o3.get(), o1.dtype(), a.get(), d1.get(), d3.get(), a.dtype(), groups, Kd, N, d1.ld());
  o1.finish();
  o3.finish();
}

void dense(GemmKernels& k, void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b,
           Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  const Wide wa(a, a_dtype, R * Kd), wb(b, b_dtype, Kd * N);  // a (R, Kd) or (Kd, R), b (Kd, N) or (N, Kd)
  WideOut o(out, out_dtype, R * N);                           // out (R, N)
  k.dense(o.get(), o.dtype(), wa.get(), wa.dtype(), wb.get(), wb.dtype(), R, Kd, N, trans_a, trans_b);
  o.finish();
}

void nn_s8(GemmKernels& k, void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd,
           int64_t N, bool accumulate) {
  WideOut o(out, out_dtype, total_rows(groups) * N);  // out (R, N); accumulating ones are float32
  k.nn_s8(o.get(), o.dtype(), in, groups, Kd, N, accumulate);
  o.finish();
}

void nn_s8_swiglu(GemmKernels& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up,
                  GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight) {
  MOE_CHECK(out_dtype == Dtype::f16, "nn_s8_swiglu: float16 h and g");
  const int64_t R = total_rows(groups);
  Buffer<float> h(size_t(R * 2 * M)), g(size_t(R * M));  // h (R, 2M), g (R, M) in float32
  k.nn_s8_swiglu({h.data(), g.data(), out.gq, out.g_scale, true}, Dtype::f32, in, up, groups, Kd, M,
                 row_weight);
  cpu::convert_elements(out.h, Dtype::f16, h.data(), Dtype::f32, R * 2 * M);  // h rounded to float16
  // g, gq and g_scale again, from h as stored.
  cpu::swiglu_forward_quantized(out.g, Dtype::f16, out.gq, out.g_scale, halves(out.h, M), Dtype::f16, R, M,
                                row_weight);
  zero_padding(out.g, M, groups);
  for_padding(groups, [&](int64_t r0, int64_t r1) {
    std::memset(out.gq + r0 * M, 0, size_t((r1 - r0) * M));
    for (int64_t r = r0; r < r1; ++r) out.g_scale[r] = quant_scale(0.0f);
  });
}

}  // namespace moe::f16_widening
