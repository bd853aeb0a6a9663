#include "moe/environment.h"

#include <omp.h>
#include <unistd.h>

#include <array>
#include <ctime>
#include <nlohmann/json.hpp>

#include "cpu/gemm/gemm.h"
#include "moe/build_info.h"
#include "moe/cpu_isa.h"

namespace moe {
namespace {

constexpr const char* kUnknown = "unknown";

std::string compiler_version() {
#if defined(__clang__)
  return __VERSION__;  // already names itself ("Debian Clang 14.0.6")
#elif defined(__GNUC__)
  return "gcc " __VERSION__;  // gcc's __VERSION__ is the bare number
#else
  return __VERSION__;
#endif
}

}  // namespace

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Environment capture_environment() {
  Environment env;
  env.git_commit = build_git_commit();
  const CpuIsa& cpu = cpu_isa();
  env.cpu_model = cpu.model;
  env.cpu_id = cpu.vendor.empty() ? kUnknown
                                  : cpu.vendor + " family " + std::to_string(cpu.family) + " model " +
                                        std::to_string(cpu.model_number);
  env.isa = isa_level_name(isa_level());
  env.cpu_extensions = cpu.extensions();
  env.threads = omp_get_max_threads();
  env.gemm_library = gemm_library_version();
  env.compiler = compiler_version();
  env.moe_version = build_version();
  env.date = utc_now_iso8601();
  std::array<char, 256> host{};
  env.hostname = gethostname(host.data(), host.size() - 1) == 0 ? host.data() : kUnknown;
  return env;
}

std::string Environment::to_json() const {
  const nlohmann::ordered_json j = {{"git_commit", git_commit},
                                    {"cpu_model", cpu_model},
                                    {"cpu_id", cpu_id},
                                    {"isa", isa},
                                    {"cpu_extensions", cpu_extensions},
                                    {"threads", threads},
                                    {"gemm_library", gemm_library},
                                    {"compiler", compiler},
                                    {"moe_version", moe_version},
                                    {"date", date},
                                    {"hostname", hostname}};
  return j.dump();
}

}  // namespace moe
