// MpiComm: the processes of an MPI job (moe/comm.h), through MPI's C API (MPI 3.1, OpenMPI 4.1 here).
// Built only when CMake finds MPI (MOE_HAVE_MPI). The argument checks are the other comms'
// (comm_checks.h) and run before any MPI call, so a bad call is a Status on every rank that made it;
// a call whose arguments differ between ranks (counts that do not match) is a bug of the caller, which
// MPI may report or not. MPI has no bf16 type: bf16 travels as 16-bit words and is summed by an op of
// ours, in f32 with each partial sum rounded to bf16 where MPI combines two (as NCCL's bf16 all-reduce
// does), so a bf16 reduction moves bf16's bytes, not f32's. Host tensors only.
#include "comm/comm_mpi.h"

#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "comm/comm_checks.h"

namespace moe {
namespace {

using namespace comm_detail;

Status mpi_status(const char* op, int rc) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::error(fmt::format("{}: MPI error: {}", op, std::string(text, size_t(len))));
}

// Counts and offsets as MPI's ints (elements of one `elem` type each).
Status to_int(const char* op, const std::vector<int64_t>& v, std::vector<int>& out) {
  out.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] > INT_MAX)
      return Status::error(fmt::format("{}: {} elements exceed MPI's int counts", op, v[i]));
    out[i] = int(v[i]);
  }
  return Status::ok();
}

// inout[i] = bf16(in[i] + inout[i]) summed in f32 (MPI_User_function): the bf16 sum's combining step.
void add_bf16_words(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16_t*>(in);
  auto* b = static_cast<bf16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// inout[i] = f16(in[i] + inout[i]) summed in f32: the f16 sum's combining step.
void add_f16_words(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const f16_t*>(in);
  auto* b = static_cast<f16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_f16(f16_to_f32(a[i]) + f16_to_f32(b[i]));
}

// The ops of ours a job's comms share: made with the world's comm, freed with the last comm (before
// MPI_Finalize: finalize_world_comm runs after every comm is gone).
struct MpiOps {
  MPI_Op sum_bf16 = MPI_OP_NULL, sum_f16 = MPI_OP_NULL;
  MpiOps() {
    MOE_CHECK(MPI_Op_create(&add_bf16_words, /*commute=*/1, &sum_bf16) == MPI_SUCCESS &&
                  MPI_Op_create(&add_f16_words, /*commute=*/1, &sum_f16) == MPI_SUCCESS,
              "MPI_Op_create failed");
  }
  ~MpiOps() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&sum_bf16);
    MPI_Op_free(&sum_f16);
  }
  MpiOps(const MpiOps&) = delete;
  MpiOps& operator=(const MpiOps&) = delete;
};

// A reduction's element type and sum op: f32 by MPI's own, bf16 and f16 as 16-bit words by ours.
std::pair<MPI_Datatype, MPI_Op> sum_of(Dtype dt, const MpiOps& ops) {
  if (dt == Dtype::f32) return {MPI_FLOAT, MPI_SUM};
  if (dt == Dtype::f16) return {MPI_UINT16_T, ops.sum_f16};
  MOE_CHECK(dt == Dtype::bf16, "a sum of f32, bf16 or f16 (check_reducible)");
  return {MPI_UINT16_T, ops.sum_bf16};
}

// The thread support MPI_Init_thread provided.
int thread_level() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level;
}

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, bool owned, std::shared_ptr<const MpiOps> ops)
      : comm_(comm), owned_(owned), ops_(std::move(ops)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  Status all_reduce_sum(Tensor& data) override {
    MOE_RETURN_IF_ERROR(check_reducible("all_reduce_sum", data));
    const int64_t n = data.numel();
    if (n > INT_MAX) return Status::error("all_reduce_sum: more elements than MPI's int counts");
    const auto [type, op] = sum_of(data.dtype(), *ops_);
    return mpi_status("all_reduce_sum", MPI_Allreduce(MPI_IN_PLACE, data.raw(), int(n), type, op, comm_));
  }

  Status all_gather(Tensor& recv, const Tensor& send) override {
    MOE_RETURN_IF_ERROR(check_gather(recv, send, size_));
    if (send.bytes() > size_t(INT_MAX)) return Status::error("all_gather: more bytes than MPI's int counts");
    // A copy of send when it shares recv's storage (MPI forbids aliasing without MPI_IN_PLACE).
    const Tensor src = send.same_storage(recv) ? send.clone() : send;
    return mpi_status("all_gather", MPI_Allgather(src.raw(), int(send.bytes()), MPI_BYTE, recv.raw(),
                                                  int(send.bytes()), MPI_BYTE, comm_));
  }

  Status reduce_scatter_sum(Tensor& recv, const Tensor& send) override {
    MOE_RETURN_IF_ERROR(check_scatter(recv, send, size_));
    const int64_t n = recv.numel();
    if (n > INT_MAX) return Status::error("reduce_scatter_sum: more elements than MPI's int counts");
    const auto [type, op] = sum_of(send.dtype(), *ops_);
    // A copy of send when it shares recv's storage (MPI forbids aliasing without MPI_IN_PLACE).
    const Tensor src = send.same_storage(recv) ? send.clone() : send;
    return mpi_status("reduce_scatter_sum",
                      MPI_Reduce_scatter_block(src.raw(), recv.raw(), int(n), type, op, comm_));
  }

  Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                      const std::vector<int64_t>& send_counts) override {
    MOE_RETURN_IF_ERROR(check_counts(recv_counts, recv, send_counts, send, size_));
    std::vector<int> sc, rc, sd, rd;
    MOE_RETURN_IF_ERROR(to_int("all_to_all_v", send_counts, sc));
    MOE_RETURN_IF_ERROR(to_int("all_to_all_v", recv_counts, rc));
    MOE_RETURN_IF_ERROR(to_int("all_to_all_v", prefix_offsets(send_counts), sd));
    MOE_RETURN_IF_ERROR(to_int("all_to_all_v", prefix_offsets(recv_counts), rd));
    MPI_Datatype elem;
    MPI_Type_contiguous(int(dtype_size(send.dtype())), MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    const Tensor src = send.same_storage(recv) ? send.clone() : send;
    const int rc_mpi =
        MPI_Alltoallv(src.raw(), sc.data(), sd.data(), elem, recv.raw(), rc.data(), rd.data(), elem, comm_);
    MPI_Type_free(&elem);
    return mpi_status("all_to_all_v", rc_mpi);
  }

  bool calls_from_any_thread() const override { return thread_level() >= MPI_THREAD_SERIALIZED; }

  Status barrier() override { return mpi_status("barrier", MPI_Barrier(comm_)); }

  std::unique_ptr<Comm> split(int color, int key) override {
    MPI_Comm sub;
    MOE_CHECK(MPI_Comm_split(comm_, color, key, &sub) == MPI_SUCCESS, "MPI_Comm_split failed");
    return std::make_unique<MpiComm>(sub, /*owned=*/true, ops_);
  }

  void abort(int code) override {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  std::shared_ptr<const MpiOps> ops_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_world_comm() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // OpenMP threads compute and never call MPI; --ep-overlap's comm thread calls it while the main
    // thread computes, one thread at a time (MpiComm::calls_from_any_thread).
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  // Errors come back as return codes (turned into Status), not as MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, /*owned=*/false, std::make_shared<const MpiOps>());
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace moe
