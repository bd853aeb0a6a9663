// The `gemv` variant's nt (cpu/gemm/gemm.h: out (rows, Kd) = dout (rows, N) @ rhs[e]^T, the backward's data
// gradient) for groups of a few rows, shared by its ISA instances. Each of out's elements is the dot product
// of a dout row with a weight row, both contiguous bf16 along N: an item (expert, a run of weight rows) walks
// its weight rows in address order, two at a time, each read once and multiplied by every live row's dout
// (which stays in L1), the products summed in float32 vectors and reduced to the element at the row's end.
// The layer L gives:
//   kNtBlockRows (live rows a register block),
//   dot_rows<R>(job): for R live rows, the sums of weight rows [k0, k1) with them, stored (or added).
// Include after gemm_gemv_kernel.h (MOE_GEMV_NS, the ISA's target pragma) and define the instance's nt with
// MOE_DEFINE_GEMV_NT(L).
#pragma once

namespace MOE_GEMV_NS {

// Weight rows an item walks: 64 rows of 2048 bf16 columns are 256 KiB, a few items a thread per expert.
constexpr int64_t kNtItemRows = 64;

// An item's view for one register block of rows: weight rows [k0, k1) of each part (rows part_cols apart),
// the block's dout rows (N apart; part p's columns from p * part_cols) and out rows (Kd apart).
struct NtJob {
  const bf16_t* w[2];  // the parts' weight row k0
  int parts;
  int64_t part_cols, rows;  // rows: k1 - k0
  const bf16_t* dout;       // the block's first row
  int64_t N;
  char* out;  // the block's first row at column k0
  int64_t Kd;
  bool out_bf16, accumulate;
};

// How far ahead of a pair of weight rows its walk prefetches into L2, the same columns of the rows this many
// bytes on: a pair's two runs of a few KiB are too short for the hardware's stream prefetchers (nt at 1-4
// rows an expert read 0.5-0.75 of a sequential read without, 0.87-0.94 at 36-72 KiB; 12 KiB as little as
// none: Qwen3's 2048 x 1536, 2-core Zen 4).
constexpr int64_t kNtAheadBytes = int64_t(64) << 10;

// Elements from a weight row to the one kNtAheadBytes on (whole rows, at least a pair).
inline int64_t nt_ahead(const NtJob& j) {
  return std::max<int64_t>(2, kNtAheadBytes / (2 * std::max<int64_t>(1, j.part_cols))) * j.part_cols;
}

// The sum of weight row k and dout row r, into out (rounded once to bf16, stored as float32 or added to it).
[[gnu::always_inline]] inline void store_dot(const NtJob& j, int r, int64_t k, float sum) {
  if (j.out_bf16) {
    reinterpret_cast<bf16_t*>(j.out)[r * j.Kd + k] = f32_to_bf16(sum);
  } else {
    float& o = reinterpret_cast<float*>(j.out)[r * j.Kd + k];
    o = j.accumulate ? o + sum : sum;
  }
}

template <class L, int... R>
constexpr std::array<void (*)(const NtJob&), sizeof...(R)> nt_blocks_by_rows(
    std::integer_sequence<int, R...>) {
  return {&L::template dot_rows<R + 1>...};
}
template <class L>
constexpr auto kNtBlocks = nt_blocks_by_rows<L>(std::make_integer_sequence<int, L::kNtBlockRows>());

// out (rows, Kd) = dout (rows, N) @ rhs[e]^T over each group's live rows, bf16 inputs; two weight parts
// are the sums over dout's halves, added (a float32 out). Threads take items by WorkShares.
template <class L>
void nt_with(void* out, bool out_bf16, const bf16_t* dout, ExpertWeights rhs, GroupedShape groups, int64_t Kd,
             int64_t N, bool accumulate) {
  const int64_t part_cols = N / rhs.parts();
  const std::vector<RowRun> items = row_runs(groups, Kd, kNtItemRows);
  const int threads = omp_get_max_threads();
  gemm_detail::WorkShares shares(int64_t(items.size()), threads);
  const int64_t elem = out_bf16 ? 2 : 4;
#pragma omp parallel num_threads(threads)
  for (int64_t i = shares.next(omp_get_thread_num()); i >= 0; i = shares.next(omp_get_thread_num())) {
    const RowRun& it = items[size_t(i)];
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, it.e);
    for (int64_t r0 = 0; r0 < g.live; r0 += L::kNtBlockRows) {
      const int64_t rows = std::min<int64_t>(L::kNtBlockRows, g.live - r0);
      NtJob j{{},
              rhs.parts(),
              part_cols,
              it.k1 - it.k0,
              dout + (g.row0 + r0) * N,
              N,
              static_cast<char*>(out) + ((g.row0 + r0) * Kd + it.k0) * elem,
              Kd,
              out_bf16,
              accumulate};
      for (int p = 0; p < rhs.parts(); ++p)
        j.w[p] = static_cast<const bf16_t*>(rhs.part(p)) + (it.e * Kd + it.k0) * part_cols;
      kNtBlocks<L>[size_t(rows - 1)](j);
    }
  }
}

}  // namespace MOE_GEMV_NS

// The instance's nt (cpu/gemm/gemm_gemv.h) on layer L, in the enclosing namespace.
#define MOE_DEFINE_GEMV_NT(L)                                                                               \
  void nt(void* out, bool out_bf16, const bf16_t* dout, ExpertWeights rhs, GroupedShape groups, int64_t Kd, \
          int64_t N, bool accumulate) {                                                                     \
    nt_with<L>(out, out_bf16, dout, rhs, groups, Kd, N, accumulate);                                        \
  }
