// What this CPU and its OS let us run, found once at startup (cpuid, xgetbv, the kernel's permission
// for AMX tile state), and the cap a user may put on it. Kernels for an ISA level are compiled into
// every build (docs/design.md, "ISA levels") and run only where `isa_level()` reaches theirs, so one
// binary runs on every x86-64 machine with the best kernels that machine has.
//
// The cap: MOE_MAX_ISA=<level> (names as isa_level_name) holds our kernels, and oneDNN's unless
// ONEDNN_MAX_CPU_ISA says otherwise, to that level: an AVX-512 machine then runs what an AVX2-only one
// runs (.ci/run's second pass). An unknown name is one warning line and no cap.
#pragma once

#include <string>

namespace moe {

// Ordered: each level includes the ones below it.
enum class IsaLevel {
  baseline,     // x86-64 (SSE2): plain C++ loops, whatever the compiler made of them
  avx2,         // AVX2 + FMA + F16C (Haswell, Zen 1-3)
  avx512,       // AVX-512 F, BW, DQ, VL (Skylake-SP, Zen 4 without its BF16 in use)
  avx512_bf16,  // + AVX512_BF16 and VNNI (Cooper Lake, Sapphire Rapids, Zen 4, Zen 5)
  amx,          // + AMX tiles with BF16 and INT8, with the OS's permission for tile state
};

const char* isa_level_name(IsaLevel level);
// false when `name` names no level.
bool parse_isa_level(const std::string& name, IsaLevel& level);

struct CpuIsa {
  std::string model;  // the brand string ("AMD EPYC 9B45"), "unknown" where cpuid has none
  // cpuid's vendor ("AuthenticAMD", "GenuineIntel"; "" where it has none) and display family (base and
  // extended: Zen 4 25, Zen 5 26): for the few kernel settings whose best value differs between
  // microarchitectures of one ISA level.
  std::string vendor;
  int family = 0;
  int model_number = 0;  // cpuid's display model (Zen 4 EPYC 17, Zen 5 2): with family, which CPU it is
  IsaLevel detected = IsaLevel::baseline;  // the best level this CPU and OS can run
  IsaLevel cap = IsaLevel::amx;            // MOE_MAX_ISA, or the top
  bool capped_by_env = false;
  // Single extensions, for --list and rows (what the CPU has, before the cap).
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false, os_avx512 = false, os_amx = false;  // XCR0 state, and AMX's permission

  IsaLevel level() const { return detected < cap ? detected : cap; }
  // "avx2 fma f16c avx512f ..." of what the CPU has; os_* refusals appended ("amx:os-refused").
  std::string extensions() const;
};

// Detected on the first call; the cap read from MOE_MAX_ISA then.
const CpuIsa& cpu_isa();
// cpu_isa().level(): the level kernels may use here.
IsaLevel isa_level();

}  // namespace moe
