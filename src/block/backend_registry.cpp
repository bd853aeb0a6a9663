#include "moe/backend.h"

namespace moe {
namespace {

// The CPU block implements every MoeConfig that validates.
Status cpu_supports(const MoeConfig& cfg) {
  return cfg.validate();
}

}  // namespace

const std::vector<Backend>& registered_backends() {
  static const std::vector<Backend> backends = {
      {"cpu", "OpenMP kernels + oneDNN (or portable) GEMMs, float32/bfloat16", cpu_supports},
  };
  return backends;
}

const Backend* find_backend(const std::string& name) {
  for (const Backend& b : registered_backends())
    if (name == b.name) return &b;
  return nullptr;
}

}  // namespace moe
