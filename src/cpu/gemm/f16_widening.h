// The kernel table's float16 GEMMs (cpu/gemm/gemm.h's forms with a float16 operand or output). No variant
// multiplies float16: the table widens each float16 operand to float32, runs the float32 form through
// its own rows (so auto's choice and the tuning file's float32 classes apply), and rounds a float16
// output to nearest even, as a bf16 GEMM on a CPU without bf16 arithmetic is multiplied in float32 (the
// bf16 kernels widen inside their packing; float16 is widened in a pass before, F16C's vcvtph2ps where
// the build has it). The epilogues that cpu/gemm/gemm.h defines on a stored output (nn_swiglu's g from h,
// nt_swiglu_grad's dh from dg, nn_s8_swiglu's g and its quantization from h) run after that rounding,
// on the float16 values, through the SwiGLU passes (cpu/ops/swiglu.h). The reference of every form is
// src/ref/gemm.cpp's, which reads and writes float16 directly.
#pragma once

#include <initializer_list>

#include "cpu/gemm/gemm.h"

namespace moe::f16_widening {

inline bool any_f16(std::initializer_list<Dtype> dtypes) {
  for (Dtype dt : dtypes)
    if (dt == Dtype::f16) return true;
  return false;
}

// GemmKernels' forms, same arguments, for calls where any_f16 of their dtypes.
void nn(GemmKernels& k, void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N);
void nn_swiglu(GemmKernels& k, void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
               Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight,
               bool keep_h);
void nt(GemmKernels& k, void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate);
void nt_swiglu_grad(GemmKernels& k, void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h,
                    Dtype dtype, GroupedShape groups, int64_t M, int64_t N, const float* row_weight);
void tn(GemmKernels& k, void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
        GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout);
void tn_pair(GemmKernels& k, void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
             const void* dout_first, const void* dout_second, Dtype in_dtype, GroupedShape groups, int64_t Kd,
             int64_t N, int64_t ld_dout);
void dense(GemmKernels& k, void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b,
           Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b);
void nn_s8(GemmKernels& k, void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd,
           int64_t N, bool accumulate);
void nn_s8_swiglu(GemmKernels& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up,
                  GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight);

}  // namespace moe::f16_widening
