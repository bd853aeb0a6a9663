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

using Entry = Backend* (*)(const KernelConfig*);

// The module's entry point, or why there is none: the library is opened once per process (the loader
// keeps it), each backend made from it belongs to its stand-in.
struct Module {
  Entry entry = nullptr;
  std::string why_not;
};

Module open_module() {
  void* handle = ::dlopen((program_dir() + kModule).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) handle = ::dlopen(kModule, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return {nullptr,
            std::string("its module ") + kModule + " cannot be opened (" + (why ? why : "no reason") + ")"};
  }
  const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "moe_make_cuda_backend"));
  if (!entry) return {nullptr, std::string(kModule) + " has no moe_make_cuda_backend"};
  return {entry, ""};
}

const Module& the_module() {
  static const Module module = open_module();
  return module;
}

class CudaModule final : public Backend {
 public:
  explicit CudaModule(const KernelConfig& kernel) : Backend(kernel) {}
  const char* name() const override { return "cuda"; }
  std::string description() const override {
    return loaded() ? real_->description() : "CUDA kernels and cuBLAS; " + the_module().why_not;
  }
  std::string devices() const override { return "CudaDevice(id=0)"; }
  std::string device_model() const override { return loaded() ? real_->device_model() : "no CUDA backend"; }
  Status available() const override {
    return loaded() ? real_->available() : Status::error("backend cuda: " + the_module().why_not);
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
  KernelTableReport* kernel_table() override { return loaded() ? real_->kernel_table() : nullptr; }

 private:
  // Made the first time anything but its name is asked.
  bool loaded() const {
    std::call_once(once_, [this] {
      if (Entry entry = the_module().entry) real_.reset(entry(&kernel()));
    });
    return real_ != nullptr;
  }
  // The backend inside; only for what needs one (available() was ok: supports() said so).
  Backend& real() const {
    MOE_CHECK(loaded(), "backend cuda: " + the_module().why_not);
    return *real_;
  }

  mutable std::once_flag once_;
  mutable std::unique_ptr<Backend> real_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_module_backend(const KernelConfig& kernel) {
  return std::make_unique<CudaModule>(kernel);
}

}  // namespace moe
