#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "comm/comm_checks.h"
#include "moe/comm.h"

namespace moe {

void Comm::abort(int code) {
  std::fflush(nullptr);
  std::exit(code);
}

namespace {

using namespace comm_detail;

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "local"; }

  Status all_reduce_sum(Tensor& data) override { return check_reducible("all_reduce_sum", data); }

  Status all_gather(Tensor& recv, const Tensor& send) override {
    MOE_RETURN_IF_ERROR(check_gather(recv, send, 1));
    recv.copy_from(send);
    return Status::ok();
  }

  Status reduce_scatter_sum(Tensor& recv, const Tensor& send) override {
    MOE_RETURN_IF_ERROR(check_scatter(recv, send, 1));
    recv.copy_from(send);
    return Status::ok();
  }

  Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                      const std::vector<int64_t>& send_counts) override {
    MOE_RETURN_IF_ERROR(check_counts(recv_counts, recv, send_counts, send, 1));
    if (send_counts[0] != recv_counts[0])
      return Status::error(fmt::format("all_to_all_v: rank 0 sends {} elements to itself but expects {}",
                                       send_counts[0], recv_counts[0]));
    recv.copy_from(send, send_counts[0]);
    return Status::ok();
  }

  Status barrier() override { return Status::ok(); }

  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<LocalComm>(); }
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() {
  return std::make_unique<LocalComm>();
}

}  // namespace moe
