// The stage ops' passes for AVX2 + FMA, in every build; run where isa_level() reaches avx2: moe/quantize.h's
// cpu functions (cpu/ops/quantize_passes.h) and swiglu.h's passes (swiglu_rows.h).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/ops/quantize_isa.h"
#include "cpu/ops/swiglu.h"
#include "cpu/ops/swiglu_isa.h"
#include "moe/dtype.h"
#include "moe/quantize.h"
#include "moe/status.h"

// Everything from here to pop_options is AVX2 + FMA code, whatever the build's -march (docs/design.md, "ISA
// levels"); the headers above are the build ISA's.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#define MOE_TARGET_AVX2 1
#include "cpu/ops/quantize_passes.h"
#include "cpu/ops/swiglu_rows.h"
#pragma GCC pop_options

namespace moe::cpu {

MOE_DEFINE_QUANTIZE_PASSES(avx2_quantize_passes)
MOE_DEFINE_SWIGLU_PASSES(avx2_swiglu_passes)

}  // namespace moe::cpu
