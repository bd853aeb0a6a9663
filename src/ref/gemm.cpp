#include "ref/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moe/status.h"
#include "ref/ref.h"

namespace moe::ref_gemm {
namespace {

double load(const void* p, Dtype dt, int64_t i) {
  return float_value(p, dt, i);
}

// f64 keeps the double (the tests' oracle reads exact sums); the others round through float, as a kernel's
// f32 accumulator does.
void store(void* p, Dtype dt, int64_t i, double v) {
  if (dt == Dtype::f64) {
    static_cast<double*>(p)[i] = v;
    return;
  }
  set_float_value(p, dt, i, float(v));
}

struct Group {
  int64_t row0, live, rows;
};
Group group(GroupedShape g, int64_t e) {
  const int64_t row0 = g.group_offset[e], rows = g.group_offset[e + 1] - row0;
  MOE_CHECK(rows >= 0, "group offsets must not decrease");
  const int64_t live = g.live_rows ? g.live_rows[e] : rows;
  MOE_CHECK(live >= 0 && live <= rows, "a group's live rows must fit in it");
  return {row0, live, rows};
}

// Element (k, j) of expert e's weights, the column concatenation of the parts (each (E, Kd, N / parts)).
// Expert e's weights (Kd, N) as doubles, the column concatenation of the parts (each (E, Kd, N / parts)).
std::vector<double> weights(ExpertWeights w, Dtype dt, int64_t e, int64_t Kd, int64_t N) {
  const int64_t part_cols = N / w.parts();
  std::vector<double> v(static_cast<size_t>(Kd * N));
  for (int64_t k = 0; k < Kd; ++k)
    for (int64_t j = 0; j < N; ++j)
      v[size_t(k * N + j)] = load(w.part(int(j / part_cols)), dt, (e * Kd + k) * part_cols + j % part_cols);
  return v;
}

void zero_rows(void* out, Dtype dt, int64_t row_begin, int64_t row_end, int64_t width) {
  for (int64_t i = row_begin * width; i < row_end * width; ++i) store(out, dt, i, 0.0);
}

}  // namespace

void grouped_gemm_nn(const GemmThresholds&, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  MOE_CHECK(N % rhs.parts() == 0, "ref nn: two weight parts split N in halves");
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t e = 0; e < groups.experts; ++e) {
    const Group g = group(groups, e);
    const std::vector<double> w = g.live > 0 ? weights(rhs, in_dtype, e, Kd, N) : std::vector<double>();
    for (int64_t r = g.row0; r < g.row0 + g.live; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < Kd; ++k) {
        const double x = load(lhs, in_dtype, r * Kd + k);
        for (int64_t j = 0; j < N; ++j) acc[size_t(j)] += x * w[size_t(k * N + j)];
      }
      for (int64_t j = 0; j < N; ++j) store(out, out_dtype, r * N + j, acc[size_t(j)]);
    }
    if (!groups.padding_kept) zero_rows(out, out_dtype, g.row0 + g.live, g.row0 + g.rows, N);
  }
}

void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool /*keep_h*/) {
  grouped_gemm_nn(k, h, out_dtype, lhs, rhs, in_dtype, groups, Kd, 2 * M);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const Group gr = group(groups, e);
    for (int64_t r = gr.row0; r < gr.row0 + gr.live; ++r)
      for (int64_t j = 0; j < M; ++j) {
        // From h as stored (rounded to out_dtype), as cpu/gemm/gemm.h defines g.
        const double gate = load(h, out_dtype, r * 2 * M + j), up = load(h, out_dtype, r * 2 * M + M + j);
        store(g, out_dtype, r * M + j, ref::silu(gate) * up * (row_weight ? row_weight[r] : 1.0));
      }
    if (!groups.padding_kept) zero_rows(g, out_dtype, gr.row0 + gr.live, gr.row0 + gr.rows, M);
  }
}

void grouped_gemm_nt(const GemmThresholds&, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(N % rhs.parts() == 0, "ref nt: two weight parts split N in halves");
  for (int64_t e = 0; e < groups.experts; ++e) {
    const Group g = group(groups, e);
    const std::vector<double> w = g.live > 0 ? weights(rhs, in_dtype, e, Kd, N) : std::vector<double>();
    for (int64_t r = g.row0; r < g.row0 + g.live; ++r)
      for (int64_t k = 0; k < Kd; ++k) {
        double sum = accumulate ? load(out, out_dtype, r * Kd + k) : 0.0;
        for (int64_t j = 0; j < N; ++j) sum += load(dout, in_dtype, r * N + j) * w[size_t(k * N + j)];
        store(out, out_dtype, r * Kd + k, sum);
      }
    if (!groups.padding_kept) zero_rows(out, out_dtype, g.row0 + g.live, g.row0 + g.rows, Kd);
  }
}

void grouped_gemm_nt_swiglu_grad(const GemmThresholds& k, void* dh, void* dg, const void* dout,
                                 ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups,
                                 int64_t M, int64_t N, const float* row_weight) {
  grouped_gemm_nt(k, dg, dtype, dout, rhs, dtype, groups, M, N, /*accumulate=*/false);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const Group g = group(groups, e);
    for (int64_t r = g.row0; r < g.row0 + g.live; ++r)
      for (int64_t j = 0; j < M; ++j) {
        // From dg as stored (rounded to dtype), as cpu/gemm/gemm.h defines dh.
        const double d = load(dg, dtype, r * M + j) * (row_weight ? row_weight[r] : 1.0);
        const double gate = load(h, dtype, r * 2 * M + j), up = load(h, dtype, r * 2 * M + M + j);
        store(dh, dtype, r * 2 * M + j, d * up * ref::silu_grad(gate));
        store(dh, dtype, r * 2 * M + M + j, d * ref::silu(gate));
      }
    if (!groups.padding_kept) zero_rows(dh, dtype, g.row0 + g.live, g.row0 + g.rows, 2 * M);
  }
}

void grouped_gemm_tn(const GemmThresholds&, void* drhs, Dtype out_dtype, const void* lhs, const void* dout,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  MOE_CHECK(ld_dout >= N, "ref tn: dout's row stride must cover its N columns");
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t e = 0; e < groups.experts; ++e) {
    const Group g = group(groups, e);
    for (int64_t k = 0; k < Kd; ++k) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t r = g.row0; r < g.row0 + g.live; ++r) {
        const double x = load(lhs, in_dtype, r * Kd + k);
        for (int64_t j = 0; j < N; ++j) acc[size_t(j)] += x * load(dout, in_dtype, r * ld_dout + j);
      }
      for (int64_t j = 0; j < N; ++j) store(drhs, out_dtype, (e * Kd + k) * N + j, acc[size_t(j)]);
    }
  }
}

void dense_gemm(const GemmThresholds&, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  MOE_CHECK(R >= 0 && Kd >= 0 && N >= 0, "negative GEMM dimension");
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < Kd; ++k)
        sum += load(a, a_dtype, trans_a ? k * R + i : i * Kd + k) *
               load(b, b_dtype, trans_b ? j * Kd + k : k * N + j);
      store(out, out_dtype, i * N + j, sum);
    }
}

}  // namespace moe::ref_gemm
