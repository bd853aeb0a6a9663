#include "moe/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe {
namespace {

constexpr IsaLevel kLevels[] = {IsaLevel::baseline, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::avx512_bf16,
                                IsaLevel::amx};

bool bit(unsigned reg, int b) {
  return (reg >> b) & 1u;
}

unsigned long long xgetbv0() {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// Linux makes a process ask before it may use AMX tile data (XFEATURE 18); the answer is per process.
bool request_amx_permission() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::string brand_string() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000004u) return "unknown";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    __get_cpuid(0x80000002u + i, &eax, &ebx, &ecx, &edx);
    const unsigned regs[4] = {eax, ebx, ecx, edx};
    std::memcpy(brand + 16 * i, regs, 16);
  }
  std::string s = brand;
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown" : s.substr(first, last - first + 1);
}

CpuIsa detect() {
  CpuIsa c;
  c.model = brand_string();
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    const unsigned words[3] = {ebx, edx, ecx};
    c.vendor.assign(reinterpret_cast<const char*>(words), sizeof(words));
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return c;
  const int base_family = int(eax >> 8 & 0xf);
  c.family = base_family == 0xf ? base_family + int(eax >> 20 & 0xff) : base_family;
  const int base_model = int(eax >> 4 & 0xf);
  c.model_number =
      base_family == 0xf || base_family == 6 ? base_model + (int(eax >> 16 & 0xf) << 4) : base_model;
  c.fma = bit(ecx, 12);
  c.f16c = bit(ecx, 29);
  const bool osxsave = bit(ecx, 27), avx = bit(ecx, 28);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  c.os_avx = avx && (xcr0 & 0x6) == 0x6;
  c.os_avx512 = c.os_avx && (xcr0 & 0xe0) == 0xe0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    const unsigned max_subleaf = eax;
    c.avx2 = bit(ebx, 5);
    c.avx512f = bit(ebx, 16);
    c.avx512dq = bit(ebx, 17);
    c.avx512bw = bit(ebx, 30);
    c.avx512vl = bit(ebx, 31);
    c.avx512_vnni = bit(ecx, 11);
    c.amx_bf16 = bit(edx, 22);
    c.amx_tile = bit(edx, 24);
    c.amx_int8 = bit(edx, 25);
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
      c.avx_vnni = bit(eax, 4);
      c.avx512_bf16 = bit(eax, 5);
    }
  }
  const bool amx_cpu = c.amx_tile && c.amx_bf16 && c.amx_int8;
  c.os_amx = amx_cpu && (xcr0 & 0x60000) == 0x60000 && request_amx_permission();

  if (c.os_avx && c.avx2 && c.fma && c.f16c) c.detected = IsaLevel::avx2;
  if (c.detected == IsaLevel::avx2 && c.os_avx512 && c.avx512f && c.avx512bw && c.avx512dq && c.avx512vl)
    c.detected = IsaLevel::avx512;
  if (c.detected == IsaLevel::avx512 && c.avx512_bf16 && c.avx512_vnni) c.detected = IsaLevel::avx512_bf16;
  if (c.detected == IsaLevel::avx512_bf16 && c.os_amx) c.detected = IsaLevel::amx;

  if (const char* env = std::getenv("MOE_MAX_ISA"); env && *env) {
    if (parse_isa_level(env, c.cap)) {
      c.capped_by_env = true;
    } else {
      std::fprintf(stderr,
                   "warning: MOE_MAX_ISA=%s names no ISA level (baseline, avx2, avx512, avx512_bf16, "
                   "amx): ignored\n",
                   env);
    }
  }
  return c;
}

}  // namespace

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::baseline:
      return "baseline";
    case IsaLevel::avx2:
      return "avx2";
    case IsaLevel::avx512:
      return "avx512";
    case IsaLevel::avx512_bf16:
      return "avx512_bf16";
    case IsaLevel::amx:
      return "amx";
  }
  return "unknown";
}

bool parse_isa_level(const std::string& name, IsaLevel& level) {
  std::string lower;
  for (char ch : name) lower += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  for (IsaLevel l : kLevels)
    if (lower == isa_level_name(l)) {
      level = l;
      return true;
    }
  return false;
}

std::string CpuIsa::extensions() const {
  const std::pair<bool, const char*> all[] = {{avx2, "avx2"},
                                              {fma, "fma"},
                                              {f16c, "f16c"},
                                              {avx_vnni, "avx_vnni"},
                                              {avx512f, "avx512f"},
                                              {avx512bw, "avx512bw"},
                                              {avx512dq, "avx512dq"},
                                              {avx512vl, "avx512vl"},
                                              {avx512_vnni, "avx512_vnni"},
                                              {avx512_bf16, "avx512_bf16"},
                                              {amx_tile, "amx_tile"},
                                              {amx_bf16, "amx_bf16"},
                                              {amx_int8, "amx_int8"}};
  std::string out;
  for (const auto& [has, name] : all)
    if (has) {
      if (!out.empty()) out += ' ';
      out += name;
    }
  if (avx2 && !os_avx) out += " avx:os-refused";
  if (avx512f && !os_avx512) out += " avx512:os-refused";
  if (amx_tile && !os_amx) out += " amx:os-refused";
  return out.empty() ? "none" : out;
}

const CpuIsa& cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

IsaLevel isa_level() {
  return cpu_isa().level();
}

}  // namespace moe
