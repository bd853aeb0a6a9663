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
#include "moe/status.h"

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

// The weights a grouped GEMM multiplies by: rhs[e] (Kd, N) of one (E, Kd, N) tensor, or the column
// concatenation [first[e] | second[e]] of two (E, Kd, N/2) tensors, read where they lie (a fused
// impl's w13 = [w1 | w3] without building it).
struct ExpertWeights {
  const void* first;
  const void* second = nullptr;
  ExpertWeights(const void* w)
      : first(w) {}  // NOLINT(google-explicit-constructor): one tensor reads as itself
  ExpertWeights(const void* w1, const void* w3) : first(w1), second(w3) {}
  int parts() const { return second ? 2 : 1; }
  const void* part(int p) const { return p == 0 ? first : second; }
};

// out (rows, N) = lhs (rows, Kd) @ rhs[e] (Kd, N)          [forward: x @ w13, g @ w2]
void grouped_gemm_nn(void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N);

// The fused up projection and SwiGLU: h (rows, 2M) = lhs (rows, Kd) @ rhs[e] (Kd, 2M) with h's columns
// [gate | up] (rhs one w13 tensor or the two parts [w1 | w3]), then g (rows, M) = silu(gate) * up, times
// row_weight[r] when given, computed from h's values as stored in out_dtype (so it equals nn followed by
// SwiGLU over the stored h). keep_h = false lets a variant skip writing h (a forward no backward
// follows); h must be a buffer of that size either way. Padding rows of g (and of h, when kept) are
// zeros.
void grouped_gemm_nn_swiglu(void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                            Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h);
// row_weight (rows) or nullptr

// The down projection's data gradient with SwiGLU's backward in its epilogue (nn_swiglu's twin):
// dg (rows, M) = dout (rows, N) @ rhs[e]^T, rhs[e] (M, N), rounded to dtype as a stored dg is, then
// dh (rows, 2M) = [dgate | dup] from h (rows, 2M) = [gate | up] and row_weight[r] when given, as
// swiglu_backward computes them from that stored dg. dg (rows, M) is scratch a variant may use (one
// without the fused form stores dg there and runs swiglu_backward over it). One dtype throughout, the
// run's. Padding rows of dh are zeros.
void grouped_gemm_nt_swiglu_grad(void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h,
                                 Dtype dtype, GroupedShape groups, int64_t M, int64_t N,
                                 const float* row_weight);
// row_weight (rows) or nullptr

// out (rows, Kd) = dout (rows, N) @ rhs[e]^T, rhs[e] (Kd, N)   [backward data: dh @ w13^T, dy @ w2^T]
// accumulate: out's live rows += the product instead of = (float32 out only). Two weight parts are
// two sums (over dout's halves) added in out, so they too need a float32 out.
void grouped_gemm_nt(void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, bool accumulate = false);

// drhs[e] (Kd, N) = lhs_e^T (Kd, rows_e) @ dout_e (rows_e, N)  [backward weights: x^T @ dh, g^T @ dy]
// dout's rows are ld_dout >= N elements apart: a column slice of a wider buffer (one half of the
// fused dh gives dw1 or dw3 directly, with no dw13 to split).
void grouped_gemm_tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);

// Two weight gradients of one lhs, as two grouped_gemm_tn calls (both douts ld_dout apart):
// drhs_first[e] = lhs_e^T @ dout_first_e, drhs_second[e] = lhs_e^T @ dout_second_e
// [dw1 and dw3 from x and dh's halves]. A variant may pack lhs^T once for both.
void grouped_gemm_tn_pair(void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
                          const void* dout_first, const void* dout_second, Dtype in_dtype,
                          GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);

// Dense: out (R, N) = a (R, Kd) @ b (Kd, N), with a and b possibly of different dtypes
// (the shared expert's second GEMM takes f32 activations and run-dtype weights, spec §2.5).
// trans_a / trans_b read a as (Kd, R) / b as (N, Kd) row-major.
void dense_gemm(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype,
                int64_t R, int64_t Kd, int64_t N, bool trans_a = false, bool trans_b = false);

// The library and ISA the active variant dispatches to, for result rows (e.g. "oneDNN 2.6.3
// avx512_core_bf16").
std::string gemm_library_version();

// The kernel registry for GEMMs: every variant implements the eight entry points above. The functions
// above call the process-wide active variant (default: the first registered that runs here). Tests and
// `--list` walk the registry; `--gemm-variant` selects one.
struct GemmVariant {
  const char* name;
  const char* description;
  decltype(&grouped_gemm_nn) nn;
  decltype(&grouped_gemm_nn_swiglu) nn_swiglu;
  decltype(&grouped_gemm_nt) nt;
  decltype(&grouped_gemm_nt_swiglu_grad) nt_swiglu_grad;
  decltype(&grouped_gemm_tn) tn;
  decltype(&grouped_gemm_tn_pair) tn_pair;
  void (*dense)(void*, Dtype, const void*, Dtype, const void*, Dtype, int64_t, int64_t, int64_t, bool, bool);
  std::string (*version)();
  // "" when the variant runs on this CPU at the ISA level isa_level() allows (moe/cpu_isa.h), else why
  // not: nothing of a variant that does not run here may be called.
  std::string (*unavailable)();
  // Whether its bf16 GEMMs multiply bf16 values (false: they widen bf16 to float32 and multiply that).
  bool (*bf16_arithmetic)();
  // Whether every output element is the same sum in the same order whatever the thread count (threads
  // split rows and columns, never a sum), so results are bitwise independent of --threads. oneDNN's
  // gemm:jit (its float32 GEMM on AVX2, and on AVX-512 from 512 rows) splits work differently per
  // thread count and its sums differ in the last bits.
  bool (*same_sums_on_any_thread_count)();
  // Whether `auto` may take it on this CPU: false where another variant that runs here measured faster
  // across the board (until `auto` measures for itself, docs/design.md).
  bool (*auto_candidate)();
};
const std::vector<GemmVariant>& gemm_variants();
const GemmVariant& active_gemm_variant();
// Selects a variant by name ("auto": the first that runs here). An unknown name or a variant that does
// not run on this CPU is an error with the reason, and changes nothing.
Status select_gemm_variant(const std::string& name);

}  // namespace moe
