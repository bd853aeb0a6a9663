#include "moe/memory_limit.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <string_view>

#include "moe/parse.h"

namespace moe {
namespace {

// cgroup v1 writes "no limit" as the largest page-aligned int64, not as a word.
constexpr uint64_t kUnlimitedV1 = uint64_t(1) << 62;

std::optional<uint64_t> read_limit(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v >= kUnlimitedV1) return std::nullopt;
  return v;
}

// The smallest limit in `file_name` over cgroup `path` and its ancestors, under `mount`.
void tightest_on_path(const std::string& mount, std::string path, const char* file_name,
                      std::optional<std::pair<uint64_t, std::string>>& best) {
  while (true) {
    const std::string file = mount + (path == "/" ? "" : path) + "/" + file_name;
    if (auto v = read_limit(file); v && (!best || *v < best->first)) best = {{*v, file}};
    if (path.empty() || path == "/") return;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

}  // namespace

std::optional<std::pair<uint64_t, std::string>> cgroup_memory_limit(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::optional<std::pair<uint64_t, std::string>> best;
  // Lines are "id:controllers:path"; v2 has id 0 and no controllers, v1 lists "memory" among them.
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) tightest_on_path(root + "/sys/fs/cgroup", path, "memory.max", best);
    for (std::string_view c : list_items(controllers))
      if (c == "memory")
        tightest_on_path(root + "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", best);
  }
  return best;
}

MemoryLimit memory_limit() {
  MemoryLimit limit{double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)), "physical memory"};
  if (auto cg = cgroup_memory_limit(); cg && double(cg->first) < limit.bytes)
    limit = {double(cg->first), "the cgroup limit in " + cg->second};
  return limit;
}

}  // namespace moe
