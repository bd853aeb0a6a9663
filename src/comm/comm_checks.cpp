#include "comm/comm_checks.h"

#include <fmt/format.h>

#include <cstring>

namespace moe::comm_detail {

Status check_reducible(const char* op, const Tensor& t) {
  if (is_run_dtype(t.dtype())) return Status::ok();
  return Status::error(
      fmt::format("{}: sums float32, bfloat16 or float16 tensors, not {}", op, dtype_name(t.dtype())));
}

Status check_same_dtype(const char* op, const Tensor& recv, const Tensor& send) {
  if (recv.dtype() == send.dtype()) return Status::ok();
  return Status::error(fmt::format("{}: send is {} but receive is {}", op, dtype_name(send.dtype()),
                                   dtype_name(recv.dtype())));
}

Status check_gather(const Tensor& recv, const Tensor& send, int ranks) {
  MOE_RETURN_IF_ERROR(check_same_dtype("all_gather", recv, send));
  if (recv.numel() == int64_t(ranks) * send.numel()) return Status::ok();
  return Status::error(fmt::format("all_gather: receive holds {} elements, {} rank{} send {} each",
                                   recv.numel(), ranks, ranks == 1 ? "" : "s", send.numel()));
}

Status check_scatter(const Tensor& recv, const Tensor& send, int ranks) {
  MOE_RETURN_IF_ERROR(check_reducible("reduce_scatter_sum", send));
  MOE_RETURN_IF_ERROR(check_same_dtype("reduce_scatter_sum", recv, send));
  if (send.numel() == int64_t(ranks) * recv.numel()) return Status::ok();
  return Status::error(fmt::format("reduce_scatter_sum: receive holds {} elements, {} rank{} send {}",
                                   recv.numel(), ranks, ranks == 1 ? "" : "s", send.numel()));
}

Status check_counts(const std::vector<int64_t>& recv_counts, const Tensor& recv,
                    const std::vector<int64_t>& send_counts, const Tensor& send, int ranks) {
  MOE_RETURN_IF_ERROR(check_same_dtype("all_to_all_v", recv, send));
  if (int64_t(send_counts.size()) != ranks || int64_t(recv_counts.size()) != ranks)
    return Status::error(fmt::format("all_to_all_v: {} send and {} receive counts for {} rank{}",
                                     send_counts.size(), recv_counts.size(), ranks, ranks == 1 ? "" : "s"));
  int64_t sent = 0, received = 0;
  for (int p = 0; p < ranks; ++p) {
    if (send_counts[size_t(p)] < 0 || recv_counts[size_t(p)] < 0)
      return Status::error(fmt::format("all_to_all_v: a negative count for rank {}", p));
    sent += send_counts[size_t(p)];
    received += recv_counts[size_t(p)];
  }
  if (sent > send.numel() || received > recv.numel())
    return Status::error(
        fmt::format("all_to_all_v: {} elements sent and {} received do not fit (send {}, "
                    "receive {})",
                    sent, received, send.numel(), recv.numel()));
  return Status::ok();
}

std::vector<int64_t> prefix_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t p = 0; p < counts.size(); ++p) off[p + 1] = off[p] + counts[p];
  return off;
}

std::vector<float> to_f32(const Tensor& t, int64_t offset, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (t.dtype() == Dtype::f32) {
    std::memcpy(v.data(), t.data<float>() + offset, size_t(n) * sizeof(float));
    return v;
  }
  if (t.dtype() == Dtype::f16) {
    const f16_t* p = t.data<f16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f16_to_f32(p[i]);
    return v;
  }
  MOE_CHECK(t.dtype() == Dtype::bf16, "to_f32: a float32, bfloat16 or float16 tensor (check_reducible)");
  const bf16_t* p = t.data<bf16_t>() + offset;
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = bf16_to_f32(p[i]);
  return v;
}

void store_f32(Tensor& t, int64_t offset, const float* v, int64_t n) {
  if (t.dtype() == Dtype::f32) {
    std::memcpy(t.data<float>() + offset, v, size_t(n) * sizeof(float));
    return;
  }
  if (t.dtype() == Dtype::f16) {
    f16_t* p = t.data<f16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(v[i]);
    return;
  }
  MOE_CHECK(t.dtype() == Dtype::bf16, "store_f32: a float32, bfloat16 or float16 tensor (check_reducible)");
  bf16_t* p = t.data<bf16_t>() + offset;
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(v[i]);
}

}  // namespace moe::comm_detail
