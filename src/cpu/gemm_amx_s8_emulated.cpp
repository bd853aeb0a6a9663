// The amx variant's int8 kernel (cpu/gemm_amx_s8_kernel.h) on the plain C++ emulation of its tiles
// (cpu/amx_tiles_emulated.h, exact int32 TDPBSSD): the same work list, packing, staging and epilogue as
// the hardware instance, runnable on any CPU. A test hook (tests/test_gemm_amx.cpp), not a variant.
#include "cpu/amx_tiles_emulated.h"
#include "cpu/gemm_amx_s8_kernel.h"
#include "cpu/gemm_variants.h"

namespace moe::amx_emulated {

MOE_DEFINE_GEMM_AMX_NN_S8(Tiles)
MOE_DEFINE_GEMM_AMX_NN_S8_SWIGLU(Tiles)

}  // namespace moe::amx_emulated
