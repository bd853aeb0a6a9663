// The `gemv` variant's tn (cpu/gemm/gemm.h: drhs[e] (Kd, N) = lhs_e^T (Kd, rows_e) @ dout_e (rows_e, N), the
// backward's weight gradient) for groups of a few rows, shared by its ISA instances. At a few rows the call
// is bound by writing the gradient, which no one reads back here: each gradient row is a sum of a few scaled
// dout rows, made a register tile at a time from the group's rows staged once (they stay in L1 or L2) and
// written with streaming stores where a tile is whole lines (regular stores read each line in first: 27-36
// against 48-85 GB/s on a 2-core Zen 4). An expert no row reached gets zeros, streamed.
// The layer L gives:
//   kTnCols (columns a tile), Staged (the staged value's type),
//   staged_size(live, Kd, N): the staged values a group takes,
//   stage(lhs, dout, ld_dout, live, Kd, N, staged): the group's lhs and dout in the layer's order,
//   rows<K>(job): K gradient rows [k, k + K) of one item, tile by tile.
// Include after gemm_gemv_kernel.h (MOE_GEMV_NS, the ISA's target pragma) and define the instance's tn with
// MOE_DEFINE_GEMV_TN(L).
#pragma once

#include "cpu/gemm/zero_gradient.h"

namespace MOE_GEMV_NS {

// Gradient rows an item writes (of N columns: 64 x 2048 bf16 are 256 KiB).
constexpr int64_t kTnItemRows = 64;

// One item's view: gradient rows [k0, k1) of expert e, its group's staged operands.
template <class Staged>
struct TnJob {
  const Staged* staged;  // the layer's stage() of the group
  int64_t live, Kd, N;
  int64_t k0, k1;
  char* out;  // gradient row k0
  bool out_bf16;
};

template <class L>
struct TnScratch {
  std::vector<StagedSlot<typename L::Staged>> staged;
  const bf16_t* staged_rows = nullptr;  // whose rows they are (nullptr: none this call)
  const bf16_t* staged_dout = nullptr;
};

// drhs (E, Kd, N) = lhs_e^T @ dout_e per group (live rows at most kGemvTnMaxRows), bf16 inputs, dout's rows
// ld_dout apart; an expert no row reached gets zeros.
template <class L>
void tn_with(void* drhs, bool out_bf16, const bf16_t* lhs, const bf16_t* dout, GroupedShape groups,
             int64_t Kd, int64_t N, int64_t ld_dout) {
  using Staged = typename L::Staged;
  const std::vector<RowRun> items = row_runs(groups, Kd, kTnItemRows);
  const int threads = omp_get_max_threads();
  gemm_detail::WorkShares shares(int64_t(items.size()), threads);
  const int64_t elem = out_bf16 ? 2 : 4;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    gemm_detail::zero_unreached_share(drhs, out_bf16 ? Dtype::bf16 : Dtype::f32, groups, Kd, N, t, n);
    static thread_local TnScratch<L> s;
    s.staged_rows = s.staged_dout = nullptr;  // a new call's rows
    for (int64_t i = shares.next(t); i >= 0; i = shares.next(t)) {
      const RowRun& it = items[size_t(i)];
      const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, it.e);
      const bf16_t* rows = lhs + g.row0 * Kd;
      const bf16_t* d = dout + g.row0 * ld_dout;
      if (s.staged_rows != rows || s.staged_dout != d) {
        const size_t size = size_t(L::staged_size(g.live, Kd, N));
        if (s.staged.size() < size) s.staged.resize(size);
        L::stage(rows, d, ld_dout, g.live, Kd, N, reinterpret_cast<Staged*>(s.staged.data()));
        s.staged_rows = rows;
        s.staged_dout = d;
      }
      L::run(TnJob<Staged>{reinterpret_cast<const Staged*>(s.staged.data()), g.live, Kd, N, it.k0, it.k1,
                           static_cast<char*>(drhs) + (it.e * Kd + it.k0) * N * elem, out_bf16});
    }
    _mm_sfence();  // the streamed stores, before the region's barrier
  }
}

}  // namespace MOE_GEMV_NS

// The instance's tn (cpu/gemm/gemm_gemv.h) on layer L, in the enclosing namespace.
#define MOE_DEFINE_GEMV_TN(L)                                                                                \
  void tn(void* drhs, bool out_bf16, const bf16_t* lhs, const bf16_t* dout, GroupedShape groups, int64_t Kd, \
          int64_t N, int64_t ld_dout) {                                                                      \
    tn_with<L>(drhs, out_bf16, lhs, dout, groups, Kd, N, ld_dout);                                           \
  }
