// The GEMM variants behind cpu/gemm/gemm.h's kernel table. Each namespace implements the forms with the
// signatures of cpu/gemm/gemm.h's Gemm*Fn (the thresholds first), its supports() (which calls its kernels
// compute; the table runs the next row for the rest) and the capability answers of GemmVariant. A
// variant plugs in with its file(s) and one MOE_GEMM_VARIANT line in gemm_registry.cpp.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/ops/swiglu.h"
#include "moe/status.h"
#include "ref/gemm.h"

// What every variant answers (GemmVariant's capability functions).
#define MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(ns)                      \
  namespace moe::ns {                                                  \
  std::string gemm_library_version();                                  \
  std::string unavailable();                                           \
  bool bf16_arithmetic();                                              \
  bool same_sums_on_any_thread_count();                                \
  bool auto_candidate();                                               \
  std::string supports(const GemmCall& call, const GemmThresholds& k); \
  }

// The grouped forms every float variant has (nn, nt, tn).
#define MOE_DECLARE_GEMM_GROUPED_FORMS(ns)                                                             \
  namespace moe::ns {                                                                                  \
  void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs,           \
                       ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N); \
  void grouped_gemm_nt(const GemmThresholds& k, void* out, Dtype out_dtype, const void* dout,          \
                       ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,  \
                       bool accumulate);                                                               \
  void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs,          \
                       const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,   \
                       int64_t ld_dout);                                                               \
  }

// The entry points of a float variant (nn, nt, tn, dense and the capabilities); the fused forms
// (nn_swiglu, nt_swiglu_grad, tn_pair) are declared by the variants that have their own (the others get
// gemm_detail's compositions in the registry), the int8 one (nn_s8) by those that have it.
#define MOE_DECLARE_GEMM_VARIANT(ns)                                                                 \
  MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(ns)                                                          \
  MOE_DECLARE_GEMM_GROUPED_FORMS(ns)                                                                 \
  namespace moe::ns {                                                                                \
  void dense_gemm(const GemmThresholds& k, void* out, Dtype out_dtype, const void* a, Dtype a_dtype, \
                  const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a,      \
                  bool trans_b);                                                                     \
  }

// A variant's nn_s8 (cpu/gemm/gemm.h).
#define MOE_DECLARE_GEMM_NN_S8(ns)                                                              \
  namespace moe::ns {                                                                           \
  void grouped_gemm_nn_s8(const GemmThresholds& k, void* out, Dtype out_dtype, Int8Operands in, \
                          GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);         \
  }
// A variant's own nn_s8_swiglu (the others get gemm_detail's composition of their nn_s8).
#define MOE_DECLARE_GEMM_NN_S8_SWIGLU(ns)                                                                    \
  namespace moe::ns {                                                                                        \
  void grouped_gemm_nn_s8_swiglu(const GemmThresholds& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in, \
                                 Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,                  \
                                 const float* row_weight);                                                   \
  }

// A variant's fused SwiGLU forms (cpu/gemm/gemm.h): nn_swiglu, and nt_swiglu_grad.
#define MOE_DECLARE_GEMM_NN_SWIGLU(ns)                                                                       \
  namespace moe::ns {                                                                                        \
  void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,   \
                              ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M, \
                              const float* row_weight, bool keep_h);                                         \
  }
#define MOE_DECLARE_GEMM_NT_SWIGLU_GRAD(ns)                                                            \
  namespace moe::ns {                                                                                  \
  void grouped_gemm_nt_swiglu_grad(const GemmThresholds& k, void* dh, void* dg, const void* dout,      \
                                   ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups, \
                                   int64_t M, int64_t N, const float* row_weight);                     \
  }

#ifdef MOE_HAVE_ONEDNN
MOE_DECLARE_GEMM_VARIANT(onednn)
MOE_DECLARE_GEMM_NN_S8(onednn)
namespace moe::onednn {
// "" where oneDNN's AMX brgemm can take the call's bf16 product (amx: oneDNN runs AMX here), else why
// not: supports() asks it with this CPU's answer, the tests with both.
std::string amx_odd_size_refusal(const GemmCall& call, bool amx);
}  // namespace moe::onednn
// dpbf16 is compiled into every build with oneDNN (its file asks GCC for AVX-512 BF16 code) and runs only
// where isa_level() reaches avx512_bf16. It has no dense kernel (the table runs oneDNN's).
#define MOE_HAVE_DPBF16 1
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(dpbf16)
// Its forms are AVX-512 BF16 code: the ISA's namespace (docs/design.md, "ISA naming rule").
MOE_DECLARE_GEMM_GROUPED_FORMS(cpu::isa_avx512_bf16::dpbf16)
MOE_DECLARE_GEMM_NN_SWIGLU(cpu::isa_avx512_bf16::dpbf16)
MOE_DECLARE_GEMM_NT_SWIGLU_GRAD(cpu::isa_avx512_bf16::dpbf16)
namespace moe::cpu::isa_avx512_bf16::dpbf16 {
void grouped_gemm_tn_pair(const GemmThresholds& k, void* drhs_first, void* drhs_second, Dtype out_dtype,
                          const void* lhs, const void* dout_first, const void* dout_second, Dtype in_dtype,
                          GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);
}  // namespace moe::cpu::isa_avx512_bf16::dpbf16
#endif
MOE_DECLARE_GEMM_VARIANT(portable)
// gemv (src/cpu/gemm/gemm_gemv.cpp): bf16 nn and nn_swiglu of groups of at most 64 rows and nt and tn of at
// most 16, weights read where they lie; in every build, run where isa_level() reaches avx2 (zmm instance from
// avx512_bf16).
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(gemv)
MOE_DECLARE_GEMM_NN_SWIGLU(gemv)
namespace moe::gemv {
void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N);
void grouped_gemm_nt(const GemmThresholds& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);
void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);
}  // namespace moe::gemv
// The grouped forms and a fused nn_swiglu (amx, avx2).
#define MOE_DECLARE_GEMM_FORMS_WITH_NN_SWIGLU(ns) \
  MOE_DECLARE_GEMM_GROUPED_FORMS(ns)              \
  MOE_DECLARE_GEMM_NN_SWIGLU(ns)
// The reference row (src/ref/gemm.h; its capabilities in portable/gemm_ref_row.cpp).
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(ref_gemm)
// Our AMX tile kernels: bf16 nn, nn_swiglu, nt and tn (src/cpu/gemm/amx/gemm_amx.cpp) and int8 nn_s8
// (src/cpu/gemm/amx/gemm_amx_s8.cpp), in every build, run where isa_level() reaches amx. amx_emulated is the
// same kernels on emulated tiles (any CPU): a test hook, not a variant.
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(amx)
MOE_DECLARE_GEMM_FORMS_WITH_NN_SWIGLU(cpu::isa_amx)
MOE_DECLARE_GEMM_NN_S8(cpu::isa_amx)
MOE_DECLARE_GEMM_NN_S8_SWIGLU(cpu::isa_amx)
MOE_DECLARE_GEMM_FORMS_WITH_NN_SWIGLU(amx_emulated)
MOE_DECLARE_GEMM_NN_S8(amx_emulated)
MOE_DECLARE_GEMM_NN_S8_SWIGLU(amx_emulated)
// Our AVX2 float kernel (src/cpu/gemm/avx2/gemm_avx2.cpp): nn, nn_swiglu, nt, nt_swiglu_grad, tn and dense of
// float32 or bf16 storage in float32 arithmetic, in every build, run where isa_level() reaches avx2.
MOE_DECLARE_GEMM_VARIANT(avx2)
MOE_DECLARE_GEMM_NN_SWIGLU(avx2)
MOE_DECLARE_GEMM_NT_SWIGLU_GRAD(avx2)
// Our int8 kernel (cpu/gemm/gemm_s8.h) on AVX2 (src/cpu/gemm/avx2/gemm_avx2_s8.cpp): nn_s8 and nn_s8_swiglu,
// in every build, run where isa_level() reaches avx2.
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(avx2_s8)
MOE_DECLARE_GEMM_NN_S8(avx2_s8)
MOE_DECLARE_GEMM_NN_S8_SWIGLU(avx2_s8)
// Our int8 kernel (cpu/gemm/gemm_s8.h) on VNNI (src/cpu/gemm/gemm_vnni.cpp, avx512/gemm_vnni_avx512.cpp,
// avx2/gemm_vnni_avx2.cpp): nn_s8 and nn_s8_swiglu, in every build, run where the CPU has AVX-512 VNNI or
// AVX-VNNI at the ISA level in use.
MOE_DECLARE_GEMM_VARIANT_CAPABILITIES(vnni)
MOE_DECLARE_GEMM_NN_S8(vnni)
MOE_DECLARE_GEMM_NN_S8_SWIGLU(vnni)
namespace moe::gemm_detail {

// Element offset -> byte pointer for a buffer of `dt`.
inline const std::byte* at(const void* base, int64_t elements, Dtype dt) {
  return static_cast<const std::byte*>(base) + size_t(elements) * dtype_size(dt);
}
inline std::byte* at(void* base, int64_t elements, Dtype dt) {
  return static_cast<std::byte*>(base) + size_t(elements) * dtype_size(dt);
}

inline void check_groups(GroupedShape groups, int64_t Kd, int64_t N) {
  MOE_CHECK(groups.experts >= 0 && Kd >= 0 && N >= 0, "negative grouped GEMM dimension");
  for (int64_t e = 0; e < groups.experts; ++e) {
    MOE_CHECK(groups.group_offset[e + 1] >= groups.group_offset[e], "group offsets must not decrease");
    MOE_CHECK(
        !groups.live_rows || (groups.live_rows[e] >= 0 &&
                              groups.live_rows[e] <= groups.group_offset[e + 1] - groups.group_offset[e]),
        "a group's live rows must fit in it");
  }
}

// Group e's rows: [row0, row0 + rows), of which the first `live` are multiplied; padding_kept: the caller
// keeps the rest holding zeros (GroupedShape).
struct GroupRows {
  int64_t row0, live, rows;
  bool padding_kept;
};
inline GroupRows group_rows(GroupedShape groups, int64_t e) {
  const int64_t row0 = groups.group_offset[e], rows = groups.group_offset[e + 1] - row0;
  return {row0, groups.live_rows ? groups.live_rows[e] : rows, rows, groups.padding_kept};
}

// Writes the padding rows [row0 + live, row0 + rows) of an output of `width` columns as zeros, unless the
// caller keeps them so.
inline void zero_padding_rows(void* out, Dtype dt, GroupRows g, int64_t width) {
  if (g.rows > g.live && !g.padding_kept)
    std::memset(at(out, (g.row0 + g.live) * width, dt), 0,
                size_t((g.rows - g.live) * width) * dtype_size(dt));
}

// zero_padding_rows for every group of `groups`.
inline void zero_padding_rows(void* out, Dtype dt, GroupedShape groups, int64_t width) {
  for (int64_t e = 0; e < groups.experts; ++e) zero_padding_rows(out, dt, group_rows(groups, e), width);
}

// nn_s8_swiglu's padding rows (cpu/gemm/gemm.h): h (where kept), g and gq zeros, g_scale a zero row's scale.
inline void write_s8_swiglu_padding(S8SwigluOut out, Dtype dt, GroupedShape groups, int64_t M) {
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows g = group_rows(groups, e);
    if (out.keep_h) zero_padding_rows(out.h, dt, g, 2 * M);
    zero_padding_rows(out.g, dt, g, M);
    zero_padding_rows(out.gq, Dtype::s8, g, M);
    for (int64_t r = g.row0 + g.live; r < g.row0 + g.rows; ++r) out.g_scale[r] = FLT_MIN;  // quant_scale(0)
  }
}

// grouped_gemm_nn_swiglu for a variant without a fused one: group by group, its nn and then SwiGLU over
// the h it stored (so h is always kept), which a group's SwiGLU reads back from the caches rather than
// from memory (a float32 h of a 1024-row group is 8 MiB, of all of them 128 MiB at the reference shape).
template <GemmNnFn Nn>
void nn_then_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                    ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                    const float* row_weight, bool /*keep_h*/) {
  const int64_t part_cols = 2 * M / rhs.parts();
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows rows = group_rows(groups, e);
    // SwiGLU of the padding rows' zeros writes g's padding as zeros, unless the caller keeps them so.
    const int64_t swiglu_rows = rows.padding_kept ? rows.live : rows.rows;
    if (swiglu_rows == 0) continue;
    const GroupedShape one{groups.group_offset + e, 1, groups.live_rows ? groups.live_rows + e : nullptr,
                           groups.zero_padding, groups.padding_kept};
    const int64_t w_offset = e * Kd * part_cols;  // expert e's weights in each part
    const ExpertWeights w = rhs.parts() == 1 ? ExpertWeights(at(rhs.first, w_offset, in_dtype))
                                             : ExpertWeights(at(rhs.first, w_offset, in_dtype),
                                                             at(rhs.second, w_offset, in_dtype));
    Nn(k, h, out_dtype, lhs, w, in_dtype, one, Kd, 2 * M);
    void* h0 = at(h, rows.row0 * 2 * M, out_dtype);
    cpu::swiglu_forward(at(g, rows.row0 * M, out_dtype), out_dtype, {h0, at(h0, M, out_dtype), 2 * M},
                        out_dtype, swiglu_rows, M, row_weight ? row_weight + rows.row0 : nullptr);
  }
}

}  // namespace moe::gemm_detail

namespace moe::gemm_detail {

// grouped_gemm_nt_swiglu_grad for a variant without a fused one: its nt stores dg, then SwiGLU's
// backward over each group's live rows (padding rows of dh are zeros whatever h holds there).
template <GemmNtFn Nt>
void nt_then_swiglu_grad(const GemmThresholds& k, void* dh, void* dg, const void* dout, ExpertWeights rhs,
                         const void* h, Dtype dtype, GroupedShape groups, int64_t M, int64_t N,
                         const float* row_weight) {
  Nt(k, dg, dtype, dout, rhs, dtype, groups, M, N, /*accumulate=*/false);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows rows = group_rows(groups, e);
    const void* h0 = at(h, rows.row0 * 2 * M, dtype);
    void* dh0 = at(dh, rows.row0 * 2 * M, dtype);
    cpu::swiglu_backward({dh0, at(dh0, M, dtype), 2 * M}, dtype, at(dg, rows.row0 * M, dtype),
                         {h0, at(h0, M, dtype), 2 * M}, dtype, rows.live, M,
                         row_weight ? row_weight + rows.row0 : nullptr);
    zero_padding_rows(dh, dtype, rows, 2 * M);
  }
}

// grouped_gemm_nn_s8_swiglu for a variant without its own: its nn_s8 into h (two parts: each into scratch,
// then into h's halves), then SwiGLU's pass that quantizes each row it makes, over every row (padding rows of
// h are zeros, so theirs are too). h is always written.
template <GemmNnS8Fn NnS8>
void nn_s8_then_swiglu(const GemmThresholds& k, S8SwigluOut out, Dtype dt, Int8Operands in, Int8UpPart up,
                       GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight) {
  const int64_t rows = groups.group_offset[groups.experts];
  if (!up.rhs) {
    NnS8(k, out.h, dt, in, groups, Kd, 2 * M, false);
  } else {
    std::vector<std::byte> part(size_t(rows * M) * dtype_size(dt));
    for (int p = 0; p < 2; ++p) {
      Int8Operands one = in;
      one.rhs = p ? up.rhs : in.rhs;
      one.rhs_scale = p ? up.rhs_scale : in.rhs_scale;
      one.rhs_packs = nullptr;  // the packs are keyed by the first part
      NnS8(k, part.data(), dt, one, groups, Kd, M, false);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(at(out.h, r * 2 * M + p * M, dt), at(part.data(), r * M, dt), size_t(M) * dtype_size(dt));
    }
  }
  cpu::swiglu_forward_quantized(out.g, dt, out.gq, out.g_scale, {out.h, at(out.h, M, dt), 2 * M}, dt, rows, M,
                                row_weight);
}

// grouped_gemm_tn_pair for a variant without its own: two tn calls.
template <GemmTnFn Tn>
void tn_twice(const GemmThresholds& k, void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
              const void* dout_first, const void* dout_second, Dtype in_dtype, GroupedShape groups,
              int64_t Kd, int64_t N, int64_t ld_dout) {
  Tn(k, drhs_first, out_dtype, lhs, dout_first, in_dtype, groups, Kd, N, ld_dout);
  Tn(k, drhs_second, out_dtype, lhs, dout_second, in_dtype, groups, Kd, N, ld_dout);
}

}  // namespace moe::gemm_detail

namespace moe::gemm_detail {

// A variant's unavailable(): "" where isa_level() reaches `level`, else "needs <what> (ISA level <level>);
// this CPU runs <its level>" (and whether MOE_MAX_ISA capped it).
inline std::string needs_isa(IsaLevel level, const char* what) {
  if (isa_level() >= level) return "";
  return std::string("needs ") + what + " (ISA level " + isa_level_name(level) + "); this CPU runs " +
         isa_level_name(isa_level()) + (cpu_isa().capped_by_env ? " (MOE_MAX_ISA)" : "");
}

// "" when every operand of the call is float32 or bfloat16 (what every variant's kernels take).
inline std::string float_operands(const GemmCall& call) {
  for (Dtype dt : {call.in_dtype, call.b_dtype, call.out_dtype})
    if (dt != Dtype::f32 && dt != Dtype::bf16)
      return std::string("no kernel for ") + dtype_name(dt) + " operands";
  return "";
}

}  // namespace moe::gemm_detail
