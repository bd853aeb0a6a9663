// The `vnni` variant: our int8 kernel (cpu/gemm/gemm_s8.h) on vpdpbusd, AVX-512 VNNI on zmm where the CPU has
// it at the ISA level in use, else AVX-VNNI on ymm. Its forms are nn_s8 and nn_s8_swiglu. Build-ISA code:
// the registry and --list call it on any CPU.
#include <string>

#include "cpu/gemm/gemm_s8.h"
#include "cpu/gemm/gemm_variants.h"
#include "moe/cpu_isa.h"

namespace moe::vnni {

std::string unavailable(const s8::Instance& inst) {
  const CpuIsa& cpu = cpu_isa();
  const std::string here = std::string("this CPU runs ") + isa_level_name(isa_level()) +
                           (cpu.capped_by_env ? " (MOE_MAX_ISA)" : "");
  if (&inst == &cpu::isa_avx512::vnni::kInstance) {
    if (!cpu.avx512_vnni) return "needs AVX-512 VNNI, which this CPU lacks";
    if (isa_level() < IsaLevel::avx512) return "needs AVX-512 VNNI (ISA level avx512); " + here;
  } else if (&inst == &cpu::isa_avx2::vnni::kInstance) {
    if (!cpu.avx_vnni) return "needs AVX-VNNI, which this CPU lacks";
    if (isa_level() < IsaLevel::avx2) return "needs AVX-VNNI (ISA level avx2); " + here;
  }
  return "";
}

const s8::Instance* hardware_instance() {
  for (const s8::Instance* inst : {&cpu::isa_avx512::vnni::kInstance, &cpu::isa_avx2::vnni::kInstance})
    if (unavailable(*inst).empty()) return inst;
  return nullptr;
}

namespace {
const s8::Instance& instance() {
  const s8::Instance* inst = hardware_instance();
  MOE_CHECK(inst != nullptr, "the vnni variant called where it does not run");
  return *inst;
}
}  // namespace

void grouped_gemm_nn_s8(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  s8::nn_s8_with(instance(), out, out_dtype, in, groups, Kd, N, accumulate);
}

void grouped_gemm_nn_s8_swiglu(const GemmThresholds& /*k*/, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                               Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,
                               const float* row_weight) {
  s8::nn_s8_swiglu_with(instance(), out, out_dtype, in, up, groups, Kd, M, row_weight);
}

std::string gemm_library_version() {
  const s8::Instance* inst = hardware_instance();
  return std::string("moe-bench int8 micro-kernel (vpdpbusd, ") + (inst ? inst->name : "none here") + ")";
}

std::string unavailable() {
  if (hardware_instance()) return "";
  return unavailable(cpu::isa_avx512::vnni::kInstance) + "; " + unavailable(cpu::isa_avx2::vnni::kInstance);
}

}  // namespace moe::vnni

MOE_DEFINE_S8_VARIANT_ANSWERS(vnni)
