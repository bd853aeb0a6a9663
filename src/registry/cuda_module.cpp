#include "registry/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>
#include <string>

namespace moe {
namespace {

constexpr const char* kModule = "libmoe_cuda.so";

// The directory of the running program, where the build puts the module beside it.
std::string program_dir() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "";
  const std::string p(path, size_t(n));
  return p.substr(0, p.rfind('/') + 1);
}

class CudaModule final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  std::string description() const override {
    return loaded() ? real_->description() : "CUDA kernels and cuBLAS; " + why_not_;
  }
  std::string devices() const override { return "CudaDevice(id=0)"; }
  std::string device_model() const override { return loaded() ? real_->device_model() : "no CUDA backend"; }
  Status available() const override {
    return loaded() ? real_->available() : Status::error("backend cuda: " + why_not_);
  }
  MemorySpace& memory() override { return real().memory(); }
  void synchronize() override {
    if (loaded()) real_->synchronize();
  }
  Status supports(OpKind op, const MoeConfig& cfg) const override {
    MOE_RETURN_IF_ERROR(available());
    return real_->supports(op, cfg);
  }
  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override { return real().make_pack(ctx); }
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override {
    return real().make_dispatch(ctx);
  }
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override {
    return real().make_expert_ffn(ctx);
  }
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override { return real().make_combine(ctx); }
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override {
    return real().make_shared_expert(ctx);
  }
  void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count) override {
    real().loss_backward(dy, sum_sq, y, count);
  }
  void convert(Tensor& dst, const Tensor& src) override { real().convert(dst, src); }
  void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) override {
    real().dense_gemm(c, a, b, trans_b);
  }
  Dtype gemm_arithmetic(Dtype storage) const override {
    return loaded() ? real_->gemm_arithmetic(storage) : storage;
  }
  Status configure(const KernelConfig& kernel) override {
    return loaded() ? real_->configure(kernel) : Status::ok();
  }
  std::string take_kernel_choices() override { return loaded() ? real_->take_kernel_choices() : ""; }
  int64_t kernel_measurements() const override { return loaded() ? real_->kernel_measurements() : 0; }

 private:
  bool loaded() const {
    std::call_once(once_, [this] { open(); });
    return real_ != nullptr;
  }
  // The backend inside; only for what needs one (available() was ok: supports() said so).
  Backend& real() const {
    MOE_CHECK(loaded(), "backend cuda: " + why_not_);
    return *real_;
  }
  void open() const {
    void* module = ::dlopen((program_dir() + kModule).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) module = ::dlopen(kModule, RTLD_NOW | RTLD_LOCAL);
    if (!module) {
      const char* why = ::dlerror();
      why_not_ =
          std::string("its module ") + kModule + " cannot be opened (" + (why ? why : "no reason") + ")";
      return;
    }
    using Entry = Backend* (*)();
    const auto entry = reinterpret_cast<Entry>(::dlsym(module, "moe_cuda_backend"));
    if (!entry) {
      why_not_ = std::string(kModule) + " has no moe_cuda_backend";
      return;
    }
    real_ = entry();
  }

  mutable std::once_flag once_;
  mutable Backend* real_ = nullptr;
  mutable std::string why_not_;
};

}  // namespace

Backend& cuda_module_backend() {
  static CudaModule module;
  return module;
}

}  // namespace moe
