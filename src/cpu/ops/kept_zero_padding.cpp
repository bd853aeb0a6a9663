#include "cpu/ops/kept_zero_padding.h"

#include <cstring>

#include "moe/check.h"

namespace moe::cpu {

void KeptZeroPadding::zero_stale(const Tensor& buf, size_t offset, size_t row_bytes, const HostPlan& plan) {
  MOE_CHECK(offset + size_t(plan.rows) * row_bytes <= buf.numel() * dtype_size(buf.dtype()),
            "KeptZeroPadding: the plan's rows overrun the buffer");
  if (!buf.same_storage(buf_) || offset != offset_ || row_bytes != row_bytes_) {
    buf_ = buf;
    offset_ = offset;
    row_bytes_ = row_bytes;
    zero_.clear();
  }
  if (int64_t(zero_.size()) < plan.rows) zero_.resize(size_t(plan.rows), 0);
  stale_.clear();
  for (int64_t r = 0; r < plan.rows; ++r) {
    const bool padding = plan.row_assignment[r] < 0;
    if (padding && !zero_[size_t(r)]) stale_.push_back(r);
    zero_[size_t(r)] = padding;
  }
  auto* rows = static_cast<char*>(buf_.raw()) + offset;
  const int64_t count = int64_t(stale_.size());
#pragma omp parallel for schedule(static) if (count > 64)
  for (int64_t i = 0; i < count; ++i) std::memset(rows + size_t(stale_[size_t(i)]) * row_bytes, 0, row_bytes);
}

}  // namespace moe::cpu
