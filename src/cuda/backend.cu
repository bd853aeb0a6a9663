#include <string>

#include "cuda/backend.h"
#include "cuda/blas.h"
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
  // Backend-owned tensors are freed after the runtime has unloaded at process exit: that is not an error.
  void deallocate(void* p) override {
    const cudaError_t err = cudaFree(p);
    MOE_CHECK(err == cudaSuccess || err == cudaErrorCudartUnloading,
              std::string("cudaFree: ") + cudaGetErrorString(err));
  }
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

// The device's memory: no state of its own (every allocation is the runtime's), shared by every backend
// instance so that tensors outlive the run that made them, as host tensors do.
CudaMemory& device_memory() {
  static CudaMemory memory;
  return memory;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const KernelConfig& kernel) : Backend(kernel) {}
  const char* name() const override { return "cuda"; }
  std::string description() const override {
    const Device& d = device();
    if (!d.available) return "CUDA kernels and cuBLAS; " + d.why_not;
    // (No fmt in .cu files: nvcc rejects fmt 9's compile-time format strings.)
    return "CUDA kernels and cuBLAS on " + d.name + " (sm_" + std::to_string(d.sm_major) +
           std::to_string(d.sm_minor) + ", " + std::to_string(d.memory_bytes >> 30) + " GiB)";
  }
  std::string devices() const override { return "CudaDevice(id=0)"; }
  std::string device_model() const override {
    const Device& d = device();
    if (!d.available) return "no CUDA device";
    return d.name + " (sm_" + std::to_string(d.sm_major) + std::to_string(d.sm_minor) + ", " +
           std::to_string(d.memory_bytes >> 30) + " GiB)";
  }
  MemorySpace& memory() override { return device_memory(); }
  void synchronize() override {
    if (device().available) CUDA_CHECK(cudaStreamSynchronize(device().stream));
  }

  Status available() const override {
    return device().available ? Status::ok() : Status::error("backend cuda: " + device().why_not);
  }

  Status supports(OpKind op, const MoeConfig& cfg) const override {
    MOE_RETURN_IF_ERROR(available());
    if (!is_run_dtype(cfg.dtype))
      return Status::error(std::string("backend cuda runs float32, bfloat16 and float16 blocks, not ") +
                           dtype_name(cfg.dtype));
    return every_op_float_expert_ffn(*this, op, cfg);
  }

  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override { return make_pack_op(ctx); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override { return make_dispatch_op(ctx); }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override {
    return make_expert_ffn_op(ctx, blas_);
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return make_combine_op(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    return make_shared_expert_op(ctx, blas_);
  }
  void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count) override {
    if (loss_partials_.empty()) loss_partials_ = empty(Dtype::f64, {kLossPartials});
    cuda::loss_backward(dy, sum_sq, y, count, loss_partials_);
  }
  void convert(Tensor& dst, const Tensor& src) override { cuda::convert(dst, src); }
  void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) override {
    const int64_t R = a.dim(0), Kd = a.dim(1), N = c.dim(1);
    blas_.gemm(c.raw(), c.dtype(), N, {a.raw(), a.dtype(), Kd},
               {b.raw(), b.dtype(), trans_b ? Kd : N, trans_b}, R, N, Kd);
  }

 private:
  Blas blas_;             // made on first use: nothing touches the runtime without a device
  Tensor loss_partials_;  // (kLossPartials) f64, made on the first loss
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const KernelConfig& kernel) {
  return std::make_unique<CudaBackend>(kernel);
}

}  // namespace moe::cuda
