// A row buffer (a forward run's; h, g and y_rows of a forward_backward without remat) whose padding rows
// (row_assignment -1: the gmm layout's tile rounding, capacity drops) keep holding zeros across calls. A call
// writes zeros only where its padding rows may hold other values (rows live in the buffer's previous layout,
// or never written), not into every padding row again: at 64-row tiles and a few rows an expert the padding
// is most of each buffer (Qwen3-30B-A3B at 64 tokens: 7552 of 8064 rows, ~100 MB of zeros a forward
// against 1.2 GB of weights; at 1 token the zeros cost a quarter of the call). The op that writes the buffer
// owns one and calls its GEMMs with GroupedShape::padding_kept, so they write the live rows only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moe/pack.h"
#include "moe/tensor.h"

namespace moe::cpu {

class KeptZeroPadding {
 public:
  // Zeros the rows of buf (rows of row_bytes from `offset` bytes into its storage) that are padding in `plan`
  // and may hold other values; the caller then writes the plan's live rows and nothing else. Another tensor,
  // offset or row width starts afresh. It holds buf's storage, so no other tensor can come at its address
  // while it remembers its rows.
  void zero_stale(const Tensor& buf, size_t offset, size_t row_bytes, const HostPlan& plan);

 private:
  Tensor buf_;
  size_t offset_ = 0, row_bytes_ = 0;
  std::vector<uint8_t> zero_;  // per row: holds zeros
  std::vector<int64_t>
      stale_;  // a call's padding rows that may hold other values (kept: no allocation a call)
};

}  // namespace moe::cpu
