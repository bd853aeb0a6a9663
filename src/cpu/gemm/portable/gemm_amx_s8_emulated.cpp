// The amx variant's int8 kernel (cpu/gemm/amx/gemm_amx_s8_kernel.h) on the plain C++ emulation of its tiles
// (cpu/gemm/portable/amx_tiles_emulated.h, exact int32 TDPBSSD): the same work list, packing, staging and
// epilogue as the hardware instance, runnable on any CPU. A test hook (tests/test_gemm_amx.cpp), not a
// variant.
#include "cpu/gemm/amx/gemm_amx_s8_kernel.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/portable/amx_tiles_emulated.h"

namespace moe::amx_emulated {

MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)
MOE_DEFINE_GEMM_AMX_NN_S8_SWIGLU(Tiles)

}  // namespace moe::amx_emulated
