// Where a result came from: build, machine and library versions, printed beside every result row and
// stored with every dump so a number can be traced back to the code and hardware that produced it.
#pragma once

#include <string>

namespace moe {

struct Environment {
  std::string git_commit;  // build_git_commit()
  std::string cpu_model;   // /proc/cpuinfo "model name"
  // "AuthenticAMD family 25 model 17": which CPU, where a VM's model name says only "AMD EPYC" for Zen 1-5.
  std::string cpu_id;
  std::string isa;  // the ISA level our kernels run at (moe/cpu_isa.h: detected, under MOE_MAX_ISA)
  std::string cpu_extensions;  // CpuIsa::extensions(): what the CPU has
  int threads = 0;             // omp_get_max_threads() at capture time
  std::string gemm_library;    // gemm_library_version()
  std::string compiler;
  std::string moe_version;  // build_version()
  std::string date;         // UTC, ISO-8601 (2024-05-01T12:34:56Z)
  std::string hostname;

  std::string to_json() const;  // flat object, keys as the field names
};

// Reads cpuid and the clock; fields that cannot be determined read "unknown".
Environment capture_environment();

// Now, UTC, ISO-8601 (2024-05-01T12:34:56Z).
std::string utc_now_iso8601();

}  // namespace moe
