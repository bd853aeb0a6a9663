// The plain grouped-GEMM reference: every form of cpu/gemm/gemm.h as scalar loops with float64 sums of the
// values as stored, rounded once to the output dtype (which may also be float64: the tests' oracle reads
// exact sums). The kernel table's last row (variant `ref`, slow, any CPU; its capabilities are the cpu
// table's business: src/cpu/gemm/portable/gemm_ref_row.cpp), the ref backend's GEMMs and the oracle of
// tests/test_gemm.cpp. Semantics, shapes and padding rows as cpu/gemm/gemm.h says; nothing is fast here.
#pragma once

#include <cstdint>

#include "moe/config.h"
#include "moe/dtype.h"
#include "moe/grouped.h"

namespace moe::ref_gemm {

void grouped_gemm_nn(const GemmThresholds& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N);
void grouped_gemm_nn_swiglu(const GemmThresholds& k, void* h, void* g, Dtype out_dtype, const void* lhs,
                            ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h);
void grouped_gemm_nt(const GemmThresholds& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);
void grouped_gemm_nt_swiglu_grad(const GemmThresholds& k, void* dh, void* dg, const void* dout,
                                 ExpertWeights rhs, const void* h, Dtype dtype, GroupedShape groups,
                                 int64_t M, int64_t N, const float* row_weight);
void grouped_gemm_tn(const GemmThresholds& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout,
                     Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);
void dense_gemm(const GemmThresholds& k, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b);
// int8: exact integer sums (src/ref/int8_gemm.cpp).
void grouped_gemm_nn_s8(const GemmThresholds& k, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);
// nn_s8's h, then g from h as stored in float64 (rounded once to out_dtype), then g's rows quantized by the
// reference quantization.
void grouped_gemm_nn_s8_swiglu(const GemmThresholds& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                               Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,
                               const float* row_weight);

}  // namespace moe::ref_gemm
