// The reference's row of the kernel table (variant `ref`): the plain loops of src/ref/gemm.h and
// src/ref/int8_gemm.cpp, last in every table, and what the table asks of a variant about them.
#include "cpu/gemm/gemm_variants.h"

namespace moe::ref_gemm {

std::string gemm_library_version() {
  return "plain float64 loops";
}

std::string unavailable() {
  return "";
}

bool bf16_arithmetic() {
  return true;  // bf16 values multiply as themselves (in float64)
}

bool same_sums_on_any_thread_count() {
  return true;
}

bool auto_candidate() {
  return false;
}

std::string supports(const GemmCall& call, const GemmThresholds&) {
  if (call.form == GemmForm::nn_s8 || call.form == GemmForm::nn_s8_swiglu)
    return call.out_dtype == Dtype::f32 || call.out_dtype == Dtype::bf16 ? "" : "a float32 or bfloat16 out";
  for (Dtype dt : {call.in_dtype, call.b_dtype, call.out_dtype})
    if (!is_float(dt)) return std::string("no ") + dtype_name(dt) + " operands";
  return "";
}

}  // namespace moe::ref_gemm
