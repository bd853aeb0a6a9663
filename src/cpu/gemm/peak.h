// The physical limit: register-resident arithmetic peaks of each ISA this CPU runs (issue "Every x86-64
// CPU", item 8), so a number can say how far it is from the machine, not only from a library's GEMM.
// Each kernel keeps independent accumulators in registers (no memory traffic), every thread runs it
// at once, and the rate is the total work over the wall time of the parallel region. Each ISA's loop
// lives in its own file compiled for that ISA (docs/design.md, "ISA levels").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moe/dtype.h"

namespace moe::cpu {

struct ArithmeticPeak {
  std::string name;   // "f32_fma_avx2", "int8_avx2", "bf16_dp_avx512", "int8_vnni_avx512", "bf16_amx", ...
  Dtype arithmetic;   // what it multiplies: f32, bf16, s8
  double tera_per_s;  // TFLOP/s (f32, bf16) or TOP/s (int8), a multiply-add counting 2
};

// Every peak this CPU runs at isa_level(), measured with `threads` threads for about `seconds` each.
std::vector<ArithmeticPeak> measure_peaks(int threads, double seconds = 0.1);

// The highest peak for multiplying `arithmetic` (bf16: AMX or AVX-512 BF16; f32: FMA), if any.
std::optional<double> best_peak(const std::vector<ArithmeticPeak>& peaks, Dtype arithmetic);

}  // namespace moe::cpu

// The per-ISA loops, each in the namespace of its ISA (code only that ISA may run): `steps` iterations
// of their register-resident block on the calling thread; each returns the operations it did (FLOPs or
// integer ops, a multiply-add counting 2).
namespace moe::cpu::isa_avx2 {
double peak_loop_f32_fma(int64_t steps);
double peak_loop_int8(int64_t steps);       // int8 products, 2 operations each
double peak_loop_int8_vnni(int64_t steps);  // VEX vpdpbusd on ymm: needs the CPU's AVX-VNNI
}  // namespace moe::cpu::isa_avx2
namespace moe::cpu::isa_avx512_bf16 {
double peak_loop_f32_fma(int64_t steps);  // AVX-512F only
double peak_loop_bf16_dp(int64_t steps);
double peak_loop_int8_vnni(int64_t steps);  // vpdpbusd (VNNI: the avx512_bf16 level has it)
}  // namespace moe::cpu::isa_avx512_bf16
namespace moe::cpu::isa_amx {
double peak_loop_bf16(int64_t steps);
double peak_loop_int8(int64_t steps);
}  // namespace moe::cpu::isa_amx
