#include "bench/harness/run_id.h"

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>

namespace moe::bench {

std::string fnv1a_hex(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

std::string run_id(const MoeConfig& c, const KernelConfig& k, const Protocol& p, std::string_view mode) {
  nlohmann::ordered_json j;
  j["config"] = nlohmann::ordered_json::parse(c.to_json());
  j["kernel"] = nlohmann::ordered_json::parse(k.to_json());
  // Knobs added after schema 1 join the identity only when set away from their default, so every run
  // that did not touch them keeps the id it had (a resumed sweep still finds its points).
  if (k.cuda_gemm_streams == KernelConfig{}.cuda_gemm_streams) j["kernel"].erase("cuda_gemm_streams");
  j["mode"] = mode;
  j["iters"] = p.iters;
  j["warmup"] = p.warmup;
  j["repeats"] = p.repeats;
  if (p.world_size != 1) j["world_size"] = p.world_size;
  return fnv1a_hex(j.dump());
}

}  // namespace moe::bench
