// The `cpu` backend: host memory, OpenMP kernels (src/cpu/ops/) and GEMMs through the kernel table it owns
// (cpu/gemm/gemm.h), made for its KernelConfig with auto's tuner on that config's tuning file.
// Synchronous: every op has finished when it returns.
#pragma once

#include <memory>

#include "cpu/gemm/gemm.h"
#include "moe/backend.h"

namespace moe::cpu {

class CpuBackend final : public Backend {
 public:
  // REQUIRES: check_kernel_config(kernel) is ok.
  explicit CpuBackend(const KernelConfig& kernel);

  // The table its ops and its dense GEMM multiply with (benchmarks time GEMMs through it alone).
  GemmKernels& table() { return table_; }

  const char* name() const override { return "cpu"; }
  std::string description() const override;
  std::string devices() const override { return "CpuDevice(id=0)"; }
  MemorySpace& memory() override { return host_memory(); }
  void synchronize() override {}
  Status supports(OpKind op, const MoeConfig& cfg) const override;

  std::unique_ptr<PackOp> make_pack(const OpContext& ctx) override;
  std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) override;
  std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) override;
  std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) override;
  std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) override;

  void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count) override;
  void convert(Tensor& dst, const Tensor& src) override;
  void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) override;
  Dtype gemm_arithmetic(Dtype storage) const override;
  KernelTableReport* kernel_table() override { return &table_; }

 private:
  GemmKernels table_;
};

}  // namespace moe::cpu
