// How much memory this process may use: the machine's physical memory, or less when the process sits
// in a cgroup with a memory limit (a container, a batch job), where going over it means the OOM killer
// instead of an error message. Read once, before a run, to refuse a shape that cannot fit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace moe {

struct MemoryLimit {
  double bytes = 0;
  std::string source;  // "physical memory" or the cgroup file that set the limit
};

// The tightest cgroup memory limit on this process: cgroup v2 memory.max or v1
// memory.limit_in_bytes of its cgroup and every ancestor ("max" and v1's near-2^63 mean none).
// `root` prefixes /proc and /sys (tests point it at a fake tree). nullopt: no limit, or no cgroup info.
std::optional<std::pair<uint64_t, std::string>> cgroup_memory_limit(const std::string& root = "");

// min(physical memory, cgroup limit).
MemoryLimit memory_limit();

}  // namespace moe
