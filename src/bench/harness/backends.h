// The backends of one process's runs: one per (device, kernel configuration), made when a run first asks
// for it and kept while the pool lives. A sweep's points that share a configuration share its backend,
// and so auto's measured choices in its kernel table; tensors made in a backend's memory (the inputs a
// sweep reuses across points) outlive the point that made them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "bench/probes/wait_policy.h"
#include "moe/backend.h"

namespace moe {

class BackendPool {
 public:
  // REQUIRES: device is registered and check_kernel_config(kernel) is ok (parse_options checked both).
  // The backend's kernels learn the process's OpenMP wait policy (settled before any run), which keys
  // their tuning.
  Backend& get(const std::string& device, const KernelConfig& kernel) {
    const std::string key =
        device + " " + kernel.to_json() + " " + kernel.tuning_file + " " + (kernel.retune ? "retune" : "");
    std::unique_ptr<Backend>& b = backends_[key];
    if (!b) {
      KernelConfig waiting = kernel;
      waiting.wait_policy = bench::name(bench::process_wait_policy().policy);
      b = make_backend(device, waiting);
    }
    MOE_CHECK(b != nullptr, "BackendPool: an unregistered device " + device);
    return *b;
  }

 private:
  std::map<std::string, std::unique_ptr<Backend>> backends_;
};

}  // namespace moe
