// CPU GEMMs through oneDNN 2.6 (brgemm kernels: avx512_core_bf16 for bf16, avx512_core for f32).
// Row-major everywhere. Inputs are in `in` dtype (f32 or bf16), accumulation is f32, the output
// dtype is chosen per call. Primitives are cached per (shape, dtypes, transposes); a process-wide
// cache is safe because the benchmark runs one block at a time (not thread-safe by design).
//
// Grouped forms take the expert-major row buffer of pack.h: group e is rows
// [group_offset[e], group_offset[e+1]) of lhs/out and uses rhs[e]. Empty groups are skipped; an
// expert with zero rows in the weight gradient gets a zero gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/dtype.h"

namespace moe {

// Group e is rows [group_offset[e], group_offset[e+1]) of the row buffer. When live_rows is given,
// only its first live_rows[e] rows hold data: the rest are layout padding (the gmm layout's tile
// rounding, capacity drops), which nn and nt do not multiply but write as zeros and tn leaves out of
// its sums (they would add nothing).
// zero_padding: the caller guarantees that the padding rows of every operand hold zeros, so a form
// may include some of them in its sums when that is faster (tn rounds its reduction up to 16 rows).
struct GroupedShape {
  const int64_t* group_offset;         // (E+1)
  int64_t experts;                     // E
  const int64_t* live_rows = nullptr;  // (E) or nullptr: every row of a group is live
  bool zero_padding = false;
};

// out (rows, N) = lhs (rows, Kd) @ rhs[e] (Kd, N)          [forward: x @ w13, g @ w2]
// out's rows are ld_out >= N elements apart (0: N): a column block of a wider buffer (the gate and
// up halves of the fused h from w1 and w3, with no w13 built).
void grouped_gemm_nn(void* out, Dtype out_dtype, const void* lhs, const void* rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_out = 0);

// out (rows, Kd) = dout (rows, N) @ rhs[e]^T, rhs[e] (Kd, N)   [backward data: dh @ w13^T, dy @ w2^T]
// dout's rows are ld_dout >= N elements apart (0: N). accumulate: out's live rows += the product
// instead of = (float32 out only), so dh @ [w1 | w3]^T is two calls over dh's halves.
void grouped_gemm_nt(void* out, Dtype out_dtype, const void* dout, const void* rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout = 0,
                     bool accumulate = false);

// drhs[e] (Kd, N) = lhs_e^T (Kd, rows_e) @ dout_e (rows_e, N)  [backward weights: x^T @ dh, g^T @ dy]
// dout's rows are ld_dout >= N elements apart: a column slice of a wider buffer (one half of the
// fused dh gives dw1 or dw3 directly, with no dw13 to split).
void grouped_gemm_tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);

// Dense: out (R, N) = a (R, Kd) @ b (Kd, N), with a and b possibly of different dtypes
// (the shared expert's second GEMM takes f32 activations and run-dtype weights, spec §2.5).
// trans_a / trans_b read a as (Kd, R) / b as (N, Kd) row-major.
void dense_gemm(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype,
                int64_t R, int64_t Kd, int64_t N, bool trans_a = false, bool trans_b = false);

// The library and ISA the active variant dispatches to, for result rows (e.g. "oneDNN 2.6.3
// avx512_core_bf16").
std::string gemm_library_version();

// The kernel registry for GEMMs: every variant implements the five entry points above. The functions
// above call the process-wide active variant (default: the first registered, the fastest). Tests and
// `--list` walk the registry; `--gemm-variant` selects one.
struct GemmVariant {
  const char* name;
  const char* description;
  decltype(&grouped_gemm_nn) nn;
  decltype(&grouped_gemm_nt) nt;
  decltype(&grouped_gemm_tn) tn;
  void (*dense)(void*, Dtype, const void*, Dtype, const void*, Dtype, int64_t, int64_t, int64_t, bool, bool);
  std::string (*version)();
};
const std::vector<GemmVariant>& gemm_variants();
const GemmVariant& active_gemm_variant();
// Returns false (and changes nothing) for an unknown name; "auto" selects the default.
bool select_gemm_variant(const std::string& name);

}  // namespace moe
