// The amx variant's nn_s8: cpu/gemm/amx/gemm_amx_s8_kernel.h on the hardware's AMX-INT8 tiles (TDPBSSD). Its
// supports() and capabilities are the variant's (src/cpu/gemm/amx/gemm_amx.cpp); it runs where isa_level()
// reaches amx (AMX tiles with BF16 and INT8, and the OS's permission for tile state). Auto measures it like
// any other nn_s8 row (on the AMX host it ran ~2x oneDNN's s8 matmul and was taken: docs/kernels.md).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "moe/dtype.h"

// Everything from here to pop_options is AMX and AVX-512 code, whatever the build's -march, with the
// same target as src/cpu/gemm/amx/gemm_amx.cpp and peak_amx.cpp (all three compile the tile layer's inline
// functions; the linker keeps one copy). The headers above are the build ISA's (docs/design.md, "ISA
// levels"), the standard headers the kernel header, vec_math.h and quantize_row.h include among them, so no
// library inline function is compiled for AVX-512 here.
#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,bmi,bmi2,amx-tile,amx-bf16,amx-int8")

#define MOE_TARGET_AVX512_BF16 1
#include "cpu/gemm/amx/amx_tiles.h"
#include "cpu/gemm/amx/gemm_amx_s8_kernel.h"

namespace moe::cpu::isa_amx {

MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)
MOE_DEFINE_GEMM_AMX_NN_S8_SWIGLU(Tiles)

}  // namespace moe::cpu::isa_amx

#pragma GCC pop_options
