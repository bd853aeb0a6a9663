// The stage ops' passes for AVX-512 BF16, in every build; run where isa_level() reaches avx512_bf16:
// moe/quantize.h's cpu functions (cpu/ops/quantize_passes.h) and swiglu.h's passes (swiglu_rows.h).
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

// Everything from here to pop_options is AVX-512 BF16 code, whatever the build's -march (docs/design.md, "ISA
// levels"); the headers above are the build ISA's.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,bmi,bmi2")
#define MOE_TARGET_AVX512_BF16 1
#include "cpu/ops/quantize_passes.h"
#include "cpu/ops/swiglu_rows.h"
#pragma GCC pop_options

namespace moe::cpu {

MOE_DEFINE_QUANTIZE_PASSES(avx512_bf16_quantize_passes)
MOE_DEFINE_SWIGLU_PASSES(avx512_bf16_swiglu_passes)

}  // namespace moe::cpu
