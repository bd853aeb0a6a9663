// The expert groups of a plan on the host, for the per-expert GEMM launches (cuBLAS takes sizes from
// the host): group_offset and group_live copied into pinned memory, one small copy and one stream
// wait per op call, after the pack that wrote them. And the padding rows of a row buffer zeroed,
// which the GEMMs (over live rows only) never write.
#pragma once

#include <cstdint>

#include "moe/pack.h"
#include "moe/tensor.h"

namespace moe::cuda {

class HostGroups {
 public:
  explicit HostGroups(int64_t experts);
  HostGroups(const HostGroups&) = delete;
  HostGroups& operator=(const HostGroups&) = delete;
  ~HostGroups();

  // Waits for the backend's stream up to the plan's pack, then reads its groups.
  void read(const DispatchPlan& plan);

  int64_t experts() const { return experts_; }
  int64_t offset(int64_t e) const { return host_[e]; }               // group_offset[e], e <= E
  int64_t live(int64_t e) const { return host_[experts_ + 1 + e]; }  // group_live[e]
  int64_t rows() const { return host_[experts_]; }                   // group_offset[E]
  bool has_padding() const { return has_padding_; }                  // some group has rows past its live ones

 private:
  int64_t experts_;
  int64_t* host_ = nullptr;  // (2E + 1) pinned: group_offset (E+1), then group_live (E)
  bool has_padding_ = false;
};

// rows_buf (max_rows, width) float32, bfloat16 or float16: rows r < groups.rows() with row_assignment[r] < 0
// set to zero (nothing to launch when no group has padding).
void zero_padding_rows(Tensor& rows_buf, const DispatchPlan& plan, const HostGroups& groups);

}  // namespace moe::cuda
