// The transpose of a routed weight's int8 values, per expert. The backward's data-gradient GEMMs read the
// weights transposed; quantization is element-wise with one scale an expert, so the forward's quantized
// values, transposed, are the transposed weights' (int8_routed and int8_all quantize them every call:
// quantized again from the float weights with strided stores, that was 59 of 70 ms of a forward_backward's
// weight quantization at the reference shape, AMX Xeon). Reference: the plain loop in the tests.
#pragma once

#include <cstdint>

namespace moe::cpu {

// dst[e] (cols, rows) = src[e] (rows, cols)^T for every e < experts.
void transpose_s8(int8_t* dst, const int8_t* src, int64_t experts, int64_t rows, int64_t cols);

}  // namespace moe::cpu
