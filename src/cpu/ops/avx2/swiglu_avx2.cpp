// swiglu.h's passes for AVX2 + FMA (swiglu_rows.h), in every build; run where isa_level() reaches avx2.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/ops/swiglu.h"
#include "cpu/ops/swiglu_isa.h"
#include "moe/dtype.h"
#include "moe/quantize.h"
#include "moe/status.h"

// Everything from here to pop_options is AVX2 code, whatever the build's -march (docs/design.md, "ISA
// levels"); the headers above are the build ISA's.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#define MOE_TARGET_AVX2 1
#include "cpu/ops/swiglu_rows.h"
#pragma GCC pop_options

namespace moe::cpu {

SwigluPasses avx2_swiglu_passes() {
  return swiglu_passes_here();
}

}  // namespace moe::cpu
