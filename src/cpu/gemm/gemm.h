// The cpu backend's GEMMs: the forms the MoE block calls, and the kernel table that runs them.
// Row-major everywhere. Inputs are in `in` dtype (f32 or bf16), accumulation is f32, the output dtype is
// chosen per call.
//
// Grouped forms take the expert-major row buffer of pack.h: group e is rows
// [group_offset[e], group_offset[e+1]) of lhs/out and uses rhs[e]. Empty groups are skipped; an
// expert with zero rows in the weight gradient gets a zero gradient.
//
// The kernel table (docs/design.md, "Kernel table"): every GEMM variant (dpbf16, onednn, portable, and
// the plain reference of src/ref/ last) gives one row per form it has: {form, dtypes, ISA level,
// supports(call) with the reason it does not, function}. A GemmKernels is the table a cpu backend owns
// for its KernelConfig on this CPU: each call runs the first row, in the order the config asks for
// (--gemm-variant first, or auto's measured choice for the call's form and shape class), that supports
// the call, and records which variant ran per form (rows' gemm_kernels). Nothing is process-wide.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "moe/backend.h"
#include "moe/config.h"
#include "moe/cpu_isa.h"
#include "moe/dtype.h"
#include "moe/grouped.h"
#include "moe/status.h"

namespace moe {

// The forms. Every variant's functions have these signatures after a leading `const GemmThresholds&`.
//
// nn: out (rows, N) = lhs (rows, Kd) @ rhs[e] (Kd, N)          [forward: x @ w13, g @ w2]
//
// nn_swiglu: the fused up projection and SwiGLU: h (rows, 2M) = lhs (rows, Kd) @ rhs[e] (Kd, 2M) with h's
// columns [gate | up] (rhs one w13 tensor or the two parts [w1 | w3]), then g (rows, M) = silu(gate) *
// up, times row_weight[r] (rows) when given, computed from h's values as stored in out_dtype (so it
// equals nn followed by SwiGLU over the stored h). keep_h = false lets a kernel skip writing h (a forward
// no backward follows); h must be a buffer of that size either way. Padding rows of g (and of h, when
// kept) are zeros.
//
// nt_swiglu_grad: the down projection's data gradient with SwiGLU's backward in its epilogue:
// dg (rows, M) = dout (rows, N) @ rhs[e]^T, rhs[e] (M, N), rounded to dtype as a stored dg is, then
// dh (rows, 2M) = [dgate | dup] from h (rows, 2M) = [gate | up] and row_weight[r] (rows) when given, as
// swiglu_backward computes them from that stored dg. dg (rows, M) is scratch a kernel may use. One
// dtype throughout, the run's. Padding rows of dh are zeros.
//
// nt: out (rows, Kd) = dout (rows, N) @ rhs[e]^T, rhs[e] (Kd, N)   [backward data: dh @ w13^T, dy @ w2^T]
// accumulate: out's live rows += the product instead of = (float32 out only). Two weight parts are
// two sums (over dout's halves) added in out, so they too need a float32 out.
//
// tn: drhs[e] (Kd, N) = lhs_e^T (Kd, rows_e) @ dout_e (rows_e, N)  [backward weights: x^T @ dh, g^T @ dy]
// dout's rows are ld_dout >= N elements apart: a column slice of a wider buffer (one half of the fused
// dh gives dw1 or dw3 directly, with no dw13 to split).
//
// tn_pair: two weight gradients of one lhs, as two tn calls (both douts ld_dout apart): drhs_first[e] =
// lhs_e^T @ dout_first_e, drhs_second[e] = lhs_e^T @ dout_second_e [dw1 and dw3 from x and dh's halves].
// A kernel may pack lhs^T once for both.
//
// dense: out (R, N) = a (R, Kd) @ b (Kd, N), with a and b possibly of different dtypes (the shared
// expert's second GEMM takes f32 activations and run-dtype weights, spec §2.5). trans_a / trans_b read a
// as (Kd, R) / b as (N, Kd) row-major.
//
// nn_s8: the int8 GEMM of the quant modes (spec §6, docs/design.md "Int8"): out (rows, N) =
// lhs (rows, Kd) s8 @ rhs[e] (Kd, N) s8 summed exactly in int32, then dequantized as the seed does,
// float(float(float(sum) * lhs_scale[r]) * rhs_scale), with rhs_scale = rhs_scale[e] (per expert) or
// rhs_scale[e * N + n] (per output column), and stored to out_dtype (f32 or bf16), or added to a
// float32 out (accumulate). Operands are symmetric int8 in [-127, 127]: -128 never occurs (kernels may
// rely on it: a pair of products then fits int16). A dense int8 GEMM is one group.
//
// nn_s8_swiglu: the int8 up projection with SwiGLU and g's row quantization in its epilogue (the int8 modes'
// forward: down's input is g quantized per row): h (rows, 2M) = nn_s8's dequantized sums in out_dtype with
// h's columns [gate | up] (rhs one (E, Kd, 2M) tensor with its scales, or two parts: rhs (E, Kd, M) the
// gate's and Int8UpPart the up projection's, each with its scales), g (rows, M) = silu(gate) * up *
// row_weight[r] from h as stored, in out_dtype, then g's rows as stored quantized as moe/quantize.h's
// quantize_rows does: gq (rows, M), g_scale (rows). keep_h = false lets a kernel skip writing h. Padding
// rows: h (when kept) and g zeros, gq zeros, g_scale quant_scale(0).
enum class GemmForm { nn, nn_swiglu, nt, nt_swiglu_grad, tn, tn_pair, dense, nn_s8, nn_s8_swiglu };
inline constexpr GemmForm kGemmForms[] = {
    GemmForm::nn,      GemmForm::nn_swiglu, GemmForm::nt,    GemmForm::nt_swiglu_grad, GemmForm::tn,
    GemmForm::tn_pair, GemmForm::dense,     GemmForm::nn_s8, GemmForm::nn_s8_swiglu};
inline constexpr int kGemmFormCount = 9;
const char* name(GemmForm form);

using GemmNnFn = void (*)(const GemmThresholds&, void* out, Dtype out_dtype, const void* lhs,
                          ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N);
using GemmNnSwigluFn = void (*)(const GemmThresholds&, void* h, void* g, Dtype out_dtype, const void* lhs,
                                ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                                const float* row_weight, bool keep_h);
using GemmNtFn = void (*)(const GemmThresholds&, void* out, Dtype out_dtype, const void* dout,
                          ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                          bool accumulate);
using GemmNtSwigluGradFn = void (*)(const GemmThresholds&, void* dh, void* dg, const void* dout,
                                    ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups,
                                    int64_t M, int64_t N, const float* row_weight);
using GemmTnFn = void (*)(const GemmThresholds&, void* drhs, Dtype out_dtype, const void* lhs,
                          const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                          int64_t ld_dout);
using GemmTnPairFn = void (*)(const GemmThresholds&, void* drhs_first, void* drhs_second, Dtype out_dtype,
                              const void* lhs, const void* dout_first, const void* dout_second,
                              Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);
using GemmDenseFn = void (*)(const GemmThresholds&, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                             const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a,
                             bool trans_b);
// Packings of weights that hold the same values across calls (int8_routed_prequant's, quantized once outside
// the timed calls; a forward run's bf16 expert weights): a variant that multiplies weights packed into a
// layout of its own packs every expert on its first call with these packs and reads that packing in later
// calls, instead of packing in every call (or reading them where they lie). One object per weight tensor;
// the caller promises its values do not change while it passes the same object (a different tensor or shape
// with it is an invariant failure).
class WeightPacks {
 public:
  WeightPacks() = default;
  WeightPacks(const WeightPacks&) = delete;
  WeightPacks& operator=(const WeightPacks&) = delete;
  // The packing named `layout` (a kernel's name for its layout) made of rhs (E, Kd, N), or nullptr.
  const uint8_t* find(const std::string& layout, const void* rhs, int64_t E, int64_t Kd, int64_t N) const;
  // `bytes` of zeroed room, 64-byte aligned, for the packing named `layout` of rhs, which the caller fills
  // before anyone finds it (one thread packs at a time: a kernel table runs one call at a time per op).
  uint8_t* make(const std::string& layout, const void* rhs, int64_t E, int64_t Kd, int64_t N, size_t bytes);

 private:
  struct Entry {
    std::string layout;
    Buffer<uint8_t> storage;
  };
  const void* rhs_ = nullptr;
  int64_t E_ = 0, Kd_ = 0, N_ = 0;
  std::vector<Entry> entries_;
  mutable std::mutex mutex_;
  void check_same(const void* rhs, int64_t E, int64_t Kd, int64_t N) const;
};

// Whether variant `name` packs kept bf16 weights (nn and nn_swiglu's ExpertWeights::packs) into a layout of
// its own once and reads that packing in later calls (gemv's tile order, amx's B tiles); the others read them
// as they lie.
inline bool packs_kept_bf16_weights(const std::string& name) {
  return name == "gemv" || name == "amx";
}

// An op's slot for one weight's packs, kept across calls: renewed when another tensor comes. It holds the
// tensors' storage, so no other tensor can come at their address while it keeps their packs.
class KeptWeightPacks {
 public:
  WeightPacks* of(const Tensor& first, const Tensor& second = Tensor());

 private:
  Tensor first_, second_;
  std::unique_ptr<WeightPacks> packs_;
};

using GemmNnS8Fn = void (*)(const GemmThresholds&, void* out, Dtype out_dtype, Int8Operands in,
                            GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);
using GemmNnS8SwigluFn = void (*)(const GemmThresholds&, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                                  Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,
                                  const float* row_weight);
// One form's function, by form (index = GemmForm); std::monostate: the variant has no kernel of it.
using GemmFn = std::variant<std::monostate, GemmNnFn, GemmNnSwigluFn, GemmNtFn, GemmNtSwigluGradFn, GemmTnFn,
                            GemmTnPairFn, GemmDenseFn, GemmNnS8Fn, GemmNnS8SwigluFn>;

// What a row's supports() sees of a call.
struct GemmCall {
  GemmForm form = GemmForm::nn;
  Dtype in_dtype = Dtype::f32;  // dense: a's dtype
  Dtype b_dtype = Dtype::f32;   // dense: b's; grouped forms: in_dtype
  Dtype out_dtype = Dtype::f32;
  int64_t rows = 0;     // grouped: the largest group's live rows; dense: R
  int64_t experts = 1;  // grouped: E
  int64_t Kd = 0, N = 0;
  int parts = 1;  // weight parts (ExpertWeights)
  bool accumulate = false;
  bool trans_a = false, trans_b = false;
  // The weights come with their WeightPacks (kept across calls: int8 forms, nn and nn_swiglu), so a kernel
  // that packs them does it once, not in every call: a class of its own (auto's choice differs: at 256-row
  // groups oneDNN's nn_s8 matched vnni's packed per call, and lost to it packed once; gemv reads a packing
  // in tile order at 1-64 rows).
  bool weights_kept = false;
  // "nn bf16->bf16 Kd=1024 N=2048 E=16 rows<=1024 parts=2" (" kept" for weights_kept): the shape class auto
  // is tuned for (group rows rounded up to a power of two).
  std::string shape_class() const;
  bool operator==(const GemmCall&) const = default;
};

// A GEMM variant: a family of kernels with one library or ISA behind them, and its rows.
struct GemmVariant {
  const char* name;
  const char* description;
  IsaLevel isa;  // the level its kernels need
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
  // Whether auto's order without a measurement (--tuning-file none, a call it cannot measure) may put it
  // first on this CPU (false: it measured slower across the board here, docs/design.md).
  bool (*auto_candidate)();
  // Whether auto may measure and take it (false: the reference, a specification, not a contender).
  bool tunable;
  // "" when its kernel of call.form computes this call, else why not (a dtype, a shape, a threshold).
  std::string (*supports)(const GemmCall& call, const GemmThresholds& k);
  std::array<GemmFn, kGemmFormCount> fns;  // by form; monostate where it has none
};
// Every variant compiled in, in the table's order (src/cpu/gemm/gemm_registry.cpp), the reference last.
const std::vector<GemmVariant>& gemm_variants();
// nullptr for an unknown name.
const GemmVariant* gemm_variant(const std::string& name);
// Ok for "auto" and for a variant that runs here; else the reason (an unknown name lists the known).
Status check_gemm_variant(const std::string& name);
// The libraries behind the variants that run here ("oneDNN 2.6.3 avx2 (bf16 computed in float32)"), for
// rows' gemm_library and the tuning file's key.
std::string gemm_library_version();

// A row of the table: one variant's kernel of one form.
struct GemmRow {
  const GemmVariant* variant;
  GemmForm form;
  GemmFn fn;
  std::string dtypes() const;  // "float32,bfloat16 -> float32,bfloat16" (what supports() may accept)
};

class GemmTuner;  // src/cpu/gemm/tuning.h: the per-machine tuning file behind auto

// The table for one KernelConfig on this CPU. Not thread-safe: one block at a time calls it (each call
// is parallel inside).
class GemmKernels final : public KernelTableReport {
 public:
  // REQUIRES: check_gemm_variant(kernel.gemm_variant) is ok. tuner: where auto's choices are measured and
  // kept (nullptr: auto takes the table's order).
  GemmKernels(const KernelConfig& kernel, GemmTuner* tuner);
  // With a tuner of its own on kernel.tuning_file (GemmTuner::resolve_path; "none": no tuner).
  explicit GemmKernels(const KernelConfig& kernel);
  ~GemmKernels() override;

  void nn(void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype, GroupedShape groups,
          int64_t Kd, int64_t N);
  void nn_swiglu(void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                 GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight, bool keep_h);
  void nt(void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
          GroupedShape groups, int64_t Kd, int64_t N, bool accumulate = false);
  void nt_swiglu_grad(void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h, Dtype dtype,
                      GroupedShape groups, int64_t M, int64_t N, const float* row_weight);
  void tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype, GroupedShape groups,
          int64_t Kd, int64_t N, int64_t ld_dout);
  void tn_pair(void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs, const void* dout_first,
               const void* dout_second, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
               int64_t ld_dout);
  void dense(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype,
             int64_t R, int64_t Kd, int64_t N, bool trans_a = false, bool trans_b = false);
  void nn_s8(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd, int64_t N,
             bool accumulate = false);
  void nn_s8_swiglu(S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up, GroupedShape groups,
                    int64_t Kd, int64_t M, const float* row_weight);

  const KernelConfig& config() const { return kernel_; }
  // The rows of this table in its base order: the variants that run here (the one --gemm-variant names
  // first), the reference last.
  const std::vector<GemmRow>& rows() const { return rows_; }
  // The row a call of `call` runs (without measuring: auto's choice so far, else the base order).
  const GemmRow& row_for(const GemmCall& call) const;
  // Per form, the variants whose rows ran since the last call: "nn=dpbf16 nt=dpbf16+onednn tn_pair=onednn".
  std::string take_choices() override;
  // Whether the table's dense bf16 GEMM multiplies bf16 (else it widens to float32): the ceiling's dtype.
  bool bf16_arithmetic() const;
  // Whether every variant that ran since the last take_choices() sums alike on any thread count.
  bool same_sums_on_any_thread_count() const;
  // How many shape classes this table has measured (auto's tuning): tests, and the harness's check that
  // no measuring happens inside a timed call.
  int64_t measurements() const override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return measurements_;
  }

 private:
  // The row that runs `call`; run(row) calls a row's function with the call's arguments (auto measures
  // the candidates through it the first time a shape class is met).
  template <typename Run>
  const GemmRow& choose(const GemmCall& call, Run&& run);
  // run(choose(call, run)), each row run (measured or chosen) named for a fatal signal's report.
  template <typename Run>
  void run_chosen(const GemmCall& call, Run&& run);
  // "GEMM row <variant>: <shape class>", formatted once per form and calling thread while its row and
  // call repeat (a block's every step): the report's text costs a copy, not a format, inside timed calls.
  static const std::string& row_text(const GemmRow& row, const GemmCall& call);
  const GemmVariant* preferred(const GemmCall& call) const;

  KernelConfig kernel_;
  std::unique_ptr<GemmTuner> own_tuner_;  // the explicit constructor's
  GemmTuner* tuner_;
  std::vector<GemmRow> rows_;
  std::map<std::string, const GemmVariant*> decided_;  // shape class -> auto's variant, this table
  std::array<uint32_t, kGemmFormCount> ran_{};         // per form, a bit per variant index that ran
  int64_t measurements_ = 0;
  // One table serves every thread that calls it (the in-process ranks of the thread comm call at once):
  // auto's decisions, the tuner and the record of what ran change under this lock.
  mutable std::recursive_mutex mutex_;
};

}  // namespace moe
