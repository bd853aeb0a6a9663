// cpu/gemm/gemm.h without oneDNN: a plain cache-blocked OpenMP GEMM, for machines that lack the library.
// Shapes and semantics: see the header. It aims at correctness and tolerable speed (the compiler
// vectorises the inner loop), not at the machine's peak.
//
// Every form reduces to one strided product c (m, n) = a (m, k) @ b (k, n) in which a and b are
// read through (row stride, column stride) views, so a transpose is only a pair of strides. b, read
// by every row of tiles, is widened once per call to row-major f32 (unless it already is). Threads
// split the tiles of c; each tile accumulates in f32 over blocks of k whose a and b panels are first
// copied to contiguous f32, so bf16 converts on the fly and the innermost loop is a unit-stride axpy
// whatever the source layout.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "cpu/ops/vec_math.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe::portable {
namespace {

using gemm_detail::at;

// A c tile of kTileM x kTileN f32 accumulators (16 KiB), its a panel (32 KiB) and the kTileK x kTileN
// panel of b (128 KiB): L2-resident.
constexpr int64_t kTileM = 32, kTileN = 128, kTileK = 256;

// Element (i, j) of a matrix at p[i * row_stride + j * col_stride].
struct View {
  const void* p;
  Dtype dtype;
  int64_t row_stride, col_stride;

  float at(int64_t i, int64_t j) const {
    const int64_t idx = i * row_stride + j * col_stride;
    // float16 never comes here: the kernel table widens it to float32 before any variant sees it.
    if (dtype == Dtype::f32) return static_cast<const float*>(p)[idx];
    if (dtype == Dtype::bf16) return bf16_to_f32(static_cast<const bf16_t*>(p)[idx]);
    MOE_CHECK(false, std::string("portable GEMM reads float32 or bfloat16, not ") + dtype_name(dtype));
  }

  // panel (rows, cols) with leading dimension ld = the f32 copy of the block at (r0, c0). Walks the
  // source along its unit stride, so a transposed view is read by cache lines, not by strides.
  void widen(float* panel, int64_t ld, int64_t r0, int64_t c0, int64_t rows, int64_t cols) const {
    if (col_stride == 1) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) panel[i * ld + j] = at(r0 + i, c0 + j);
    } else {
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < rows; ++i) panel[i * ld + j] = at(r0 + i, c0 + j);
    }
  }
};

// c (m, n), rows ldc >= n apart, = a (m, k) @ b (k, n), or += when accumulate (f32 c); k == 0 writes
// zeros (adds nothing).
void gemm(void* c, Dtype c_dtype, View a, View b, int64_t m, int64_t k, int64_t n, int64_t ldc = 0,
          bool accumulate = false) {
  if (ldc == 0) ldc = n;
  if (m == 0 || n == 0) return;
  // Every row of tiles reads all of b, so b is widened to row-major f32 once, up front (in square
  // blocks, so a transposed b is read and written by cache lines), unless it already is. a's panels
  // are small and are widened per tile.
  Buffer<float> b_rows;
  const float* bf = static_cast<const float*>(b.p);
  if (b.dtype != Dtype::f32 || b.col_stride != 1 || b.row_stride != n) {
    b_rows = Buffer<float>(size_t(k * n));
    constexpr int64_t kBlock = 64;
    const int64_t blocks_k = (k + kBlock - 1) / kBlock, blocks_n = (n + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2)
    for (int64_t bk = 0; bk < blocks_k; ++bk) {
      for (int64_t bn = 0; bn < blocks_n; ++bn) {
        const int64_t k0 = bk * kBlock, j0 = bn * kBlock;
        b.widen(b_rows.data() + k0 * n + j0, n, k0, j0, std::min(kBlock, k - k0), std::min(kBlock, n - j0));
      }
    }
    bf = b_rows.data();
  }
  const int64_t tiles_m = (m + kTileM - 1) / kTileM, tiles_n = (n + kTileN - 1) / kTileN;
#pragma omp parallel
  {
    std::vector<float> a_panel(kTileM * kTileK), b_panel(kTileK * kTileN), acc(kTileM * kTileN);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
      for (int64_t tn = 0; tn < tiles_n; ++tn) {
        const int64_t i0 = tm * kTileM, j0 = tn * kTileN;
        const int64_t mb = std::min(kTileM, m - i0), nb = std::min(kTileN, n - j0);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
          const int64_t kb = std::min(kTileK, k - k0);
          a.widen(a_panel.data(), kTileK, i0, k0, mb, kb);
          // A contiguous copy: rows of b itself lie n floats apart and would collide in the caches.
          for (int64_t kk = 0; kk < kb; ++kk)
            std::memcpy(&b_panel[size_t(kk * kTileN)], bf + (k0 + kk) * n + j0, size_t(nb) * sizeof(float));
          for (int64_t i = 0; i < mb; ++i) {
            float* __restrict crow = &acc[size_t(i * kTileN)];
            for (int64_t kk = 0; kk < kb; ++kk) {
              const float av = a_panel[size_t(i * kTileK + kk)];
              const float* __restrict brow = &b_panel[size_t(kk * kTileN)];
              for (int64_t j = 0; j < nb; ++j) crow[j] += av * brow[j];
            }
          }
        }
        for (int64_t i = 0; i < mb; ++i) {
          float* crow = &acc[size_t(i * kTileN)];
          const int64_t base = (i0 + i) * ldc + j0;
          if (accumulate) {
            const float* old = static_cast<const float*>(c) + base;
            for (int64_t j = 0; j < nb; ++j) crow[j] += old[j];
          }
          cpu::store_row(static_cast<char*>(c) + size_t(base) * dtype_size(c_dtype), c_dtype, crow, nb);
        }
      }
    }
  }
}

}  // namespace

void grouped_gemm_nn(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* lhs,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  gemm_detail::check_groups(groups, Kd, N);
  const int64_t part_cols = N / rhs.parts();
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    for (int p = 0; p < rhs.parts(); ++p)
      gemm(at(out, g.row0 * N + p * part_cols, out_dtype), out_dtype,
           View{at(lhs, g.row0 * Kd, in_dtype), in_dtype, Kd, 1},
           View{at(rhs.part(p), e * Kd * part_cols, in_dtype), in_dtype, part_cols, 1}, g.live, Kd, part_cols,
           N);
    gemm_detail::zero_padding_rows(out, out_dtype, g, N);
  }
}

void grouped_gemm_nt(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* dout,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     bool accumulate) {
  gemm_detail::check_groups(groups, Kd, N);
  const int64_t part_cols = N / rhs.parts();
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    for (int p = 0; p < rhs.parts(); ++p)
      gemm(at(out, g.row0 * Kd, out_dtype), out_dtype,
           View{at(dout, g.row0 * N + p * part_cols, in_dtype), in_dtype, N, 1},
           View{at(rhs.part(p), e * Kd * part_cols, in_dtype), in_dtype, 1, part_cols}, g.live, part_cols, Kd,
           Kd, accumulate || p > 0);
    gemm_detail::zero_padding_rows(out, out_dtype, g, Kd);
  }
}

void grouped_gemm_tn(const GemmThresholds& /*k*/, void* drhs, Dtype out_dtype, const void* lhs,
                     const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     int64_t ld_dout) {
  gemm_detail::check_groups(groups, Kd, N);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    // No live row is an empty sum: gemm writes the zero gradient.
    gemm(at(drhs, e * Kd * N, out_dtype), out_dtype, View{at(lhs, g.row0 * Kd, in_dtype), in_dtype, 1, Kd},
         View{at(dout, g.row0 * ld_dout, in_dtype), in_dtype, ld_dout, 1}, Kd, g.live, N);
  }
}

void dense_gemm(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  MOE_CHECK(R >= 0 && Kd >= 0 && N >= 0, "negative GEMM dimension");
  const View av = trans_a ? View{a, a_dtype, 1, R} : View{a, a_dtype, Kd, 1};
  const View bv = trans_b ? View{b, b_dtype, 1, Kd} : View{b, b_dtype, N, 1};
  gemm(out, out_dtype, av, bv, R, Kd, N);
}

std::string gemm_library_version() {
  return "portable fallback";
}

std::string unavailable() {
  return "";
}

bool bf16_arithmetic() {
  return false;
}

bool same_sums_on_any_thread_count() {
  return true;
}

bool auto_candidate() {
  return true;
}

}  // namespace moe::portable

namespace moe::portable {

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  return gemm_detail::float_operands(call);
}

}  // namespace moe::portable
