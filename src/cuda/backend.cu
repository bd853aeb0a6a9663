#include <string>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"

namespace moe::cuda {
namespace {

class CudaMemory final : public MemorySpace {
 public:
  std::string name() const override { return "cuda:0"; }
  bool host_accessible() const override { return false; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // an out-of-memory error is not sticky; clear it for the caller's report
      return nullptr;
    }
    return p;
  }
  void deallocate(void* p) override { CUDA_CHECK(cudaFree(p)); }
  // The host buffer may be freed as soon as this returns: wait for the copy.
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, device().stream));
    CUDA_CHECK(cudaStreamSynchronize(device().stream));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, device().stream));
    CUDA_CHECK(cudaStreamSynchronize(device().stream));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, device().stream));
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, device().stream));
  }
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  std::string description() const override {
    const Device& d = device();
    if (!d.available) return "CUDA kernels (skeleton: dispatch and convert); " + d.why_not;
    // (No fmt in .cu files: nvcc rejects fmt 9's compile-time format strings.)
    return "CUDA kernels (skeleton: dispatch and convert) on " + d.name + " (sm_" +
           std::to_string(d.sm_major) + std::to_string(d.sm_minor) + ", " +
           std::to_string(d.memory_bytes >> 30) + " GiB)";
  }
  std::string devices() const override { return "CudaDevice(id=0)"; }
  MemorySpace& memory() override { return memory_; }
  void synchronize() override {
    if (device().available) CUDA_CHECK(cudaStreamSynchronize(device().stream));
  }

  Status available() const override {
    return device().available ? Status::ok() : Status::error("backend cuda: " + device().why_not);
  }

  Status supports(OpKind op, const MoeConfig& cfg) const override {
    MOE_RETURN_IF_ERROR(available());
    if (!is_run_dtype(cfg.dtype))
      return Status::error(std::string("backend cuda runs float32 and bfloat16 blocks, not ") +
                           dtype_name(cfg.dtype));
    switch (op) {
      case OpKind::dispatch:
      case OpKind::convert:
        return Status::ok();
      case OpKind::pack:
      case OpKind::expert_ffn:
      case OpKind::combine:
      case OpKind::shared_expert:
      case OpKind::loss:
      case OpKind::dense_gemm:
        return not_implemented(*this, op);
    }
    MOE_CHECK(false, "unknown op");
  }

  std::unique_ptr<PackOp> make_pack(const OpContext&) override { unsupported(OpKind::pack); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override { return make_dispatch_op(ctx); }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext&) override { unsupported(OpKind::expert_ffn); }
  std::unique_ptr<CombineOp> make_combine(const OpContext&) override { unsupported(OpKind::combine); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext&) override {
    unsupported(OpKind::shared_expert);
  }
  void loss_backward(Tensor&, Tensor&, const Tensor&, int64_t) override { unsupported(OpKind::loss); }
  void convert(Tensor& dst, const Tensor& src) override { cuda::convert(dst, src); }
  void dense_gemm(Tensor&, const Tensor&, const Tensor&, bool) override { unsupported(OpKind::dense_gemm); }

 private:
  [[noreturn]] void unsupported(OpKind op) const {
    MOE_CHECK(false,
              std::string("cuda backend asked for op ") + moe::name(op) + ", which supports() refuses");
  }

  CudaMemory memory_;
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace moe::cuda
