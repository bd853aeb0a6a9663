// The amx variant's kernel (cpu/gemm/amx/gemm_amx_kernel.h) on the plain C++ emulation of its tiles
// (cpu/gemm/portable/amx_tiles_emulated.h): the same work list, packing, staging and epilogues as the
// hardware instance, runnable on any CPU. A test hook (tests/test_gemm_amx.cpp), not a variant: nothing in
// the kernel table calls it.
#include "cpu/gemm/amx/gemm_amx_kernel.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/portable/amx_tiles_emulated.h"

namespace moe::amx_emulated {

MOE_DEFINE_GEMM_AMX_FORMS(Tiles)

}  // namespace moe::amx_emulated
