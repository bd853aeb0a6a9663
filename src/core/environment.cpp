#include "moe/environment.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "moe/build_info.h"
#include "moe/gemm.h"

namespace moe {
namespace {

constexpr const char* kUnknown = "unknown";

// The value of the first "key<tabs>: value" line of /proc/cpuinfo, or "" when absent (non-x86 kernels
// name fields differently).
std::string cpuinfo_field(const std::string& cpuinfo, const std::string& key) {
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    size_t colon = line.find(':', key.size());
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) continue;
    size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::string isa_list(const std::string& flags) {
  // Best first, so the list opens with the widest extension the kernels can use.
  constexpr std::array kIsas = {"avx512_bf16", "avx512_vnni", "avx512f", "avx2"};
  std::istringstream words(flags);
  std::vector<std::string> have{std::istream_iterator<std::string>(words), {}};
  std::string out;
  for (const char* isa : kIsas) {
    if (std::find(have.begin(), have.end(), isa) == have.end()) continue;
    if (!out.empty()) out += ',';
    out += isa;
  }
  return out.empty() ? "none" : out;
}

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

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

Environment capture_environment() {
  std::ifstream in("/proc/cpuinfo");
  std::string cpuinfo{std::istreambuf_iterator<char>(in), {}};
  Environment env;
  env.git_commit = build_git_commit();
  env.cpu_model = cpuinfo_field(cpuinfo, "model name");
  if (env.cpu_model.empty()) env.cpu_model = kUnknown;
  env.isa = isa_list(cpuinfo_field(cpuinfo, "flags"));
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
  nlohmann::ordered_json j;
  j["git_commit"] = git_commit;
  j["cpu_model"] = cpu_model;
  j["isa"] = isa;
  j["threads"] = threads;
  j["gemm_library"] = gemm_library;
  j["compiler"] = compiler;
  j["moe_version"] = moe_version;
  j["date"] = date;
  j["hostname"] = hostname;
  return j.dump();
}

}  // namespace moe
