// Where a block runs. Each backend says which configurations it supports (a Status with the reason
// when not), so the CLI can refuse a run with one clear line before allocating anything. The CPU
// backend is always present; a CUDA backend registers itself when the build has one.
#pragma once

#include <string>
#include <vector>

#include "moe/config.h"
#include "moe/status.h"

namespace moe {

struct Backend {
  const char* name;
  const char* description;
  Status (*supports)(const MoeConfig& cfg);
};

const std::vector<Backend>& registered_backends();
const Backend* find_backend(const std::string& name);

}  // namespace moe
