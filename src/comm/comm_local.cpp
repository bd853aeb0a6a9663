#include <fmt/format.h>

#include "moe/comm.h"

namespace moe {
namespace {

Status check_reducible(const char* op, const Tensor& t) {
  if (is_run_dtype(t.dtype())) return Status::ok();
  return Status::error(
      fmt::format("{}: sums float32 or bfloat16 tensors, not {}", op, dtype_name(t.dtype())));
}

// Copies the first n elements of src to dst after checking what a user of the comm could get wrong.
Status copy_prefix(const char* op, Tensor& dst, const Tensor& src, int64_t n) {
  if (dst.dtype() != src.dtype())
    return Status::error(fmt::format("{}: send is {} but receive is {}", op, dtype_name(src.dtype()),
                                     dtype_name(dst.dtype())));
  if (n > dst.numel() || n > src.numel())
    return Status::error(
        fmt::format("{}: {} elements do not fit (send {}, receive {})", op, n, src.numel(), dst.numel()));
  dst.copy_from(src, n);
  return Status::ok();
}

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "local"; }

  Status all_reduce_sum(Tensor& data) override { return check_reducible("all_reduce_sum", data); }

  Status all_gather(Tensor& recv, const Tensor& send) override {
    if (recv.numel() != send.numel())
      return Status::error(
          fmt::format("all_gather: receive holds {} elements, 1 rank sends {}", recv.numel(), send.numel()));
    return copy_prefix("all_gather", recv, send, send.numel());
  }

  Status reduce_scatter_sum(Tensor& recv, const Tensor& send) override {
    MOE_RETURN_IF_ERROR(check_reducible("reduce_scatter_sum", send));
    if (recv.numel() != send.numel())
      return Status::error(fmt::format("reduce_scatter_sum: receive holds {} elements, 1 rank sends {}",
                                       recv.numel(), send.numel()));
    return copy_prefix("reduce_scatter_sum", recv, send, send.numel());
  }

  Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                      const std::vector<int64_t>& send_counts) override {
    if (send_counts.size() != 1 || recv_counts.size() != 1)
      return Status::error(fmt::format("all_to_all_v: {} send and {} receive counts for 1 rank",
                                       send_counts.size(), recv_counts.size()));
    if (send_counts[0] != recv_counts[0] || send_counts[0] < 0)
      return Status::error(fmt::format("all_to_all_v: rank 0 sends {} elements to itself but expects {}",
                                       send_counts[0], recv_counts[0]));
    return copy_prefix("all_to_all_v", recv, send, send_counts[0]);
  }

  Status barrier() override { return Status::ok(); }

  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<LocalComm>(); }
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() {
  return std::make_unique<LocalComm>();
}

}  // namespace moe
