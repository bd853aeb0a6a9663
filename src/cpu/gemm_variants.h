// The GEMM variants behind moe/gemm.h's registry. Each namespace implements the same five entry points
// with the signatures of moe/gemm.h (no default arguments here: the registry passes every one).
#pragma once

#include <cstdint>
#include <string>

#include "moe/gemm.h"

#define MOE_DECLARE_GEMM_VARIANT(ns)                                                                        \
  namespace moe::ns {                                                                                     \
  void grouped_gemm_nn(void* out, Dtype out_dtype, const void* lhs, const void* rhs, Dtype in_dtype,      \
                       GroupedShape groups, int64_t Kd, int64_t N);                                       \
  void grouped_gemm_nt(void* out, Dtype out_dtype, const void* dout, const void* rhs, Dtype in_dtype,     \
                       GroupedShape groups, int64_t Kd, int64_t N);                                       \
  void grouped_gemm_tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,    \
                       GroupedShape groups, int64_t Kd, int64_t N);                                       \
  void dense_gemm(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype, \
                  int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b);                          \
  std::string gemm_library_version();                                                                     \
  }

#ifdef MOE_HAVE_ONEDNN
MOE_DECLARE_GEMM_VARIANT(onednn)
#endif
MOE_DECLARE_GEMM_VARIANT(portable)
