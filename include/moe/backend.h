// Where a block runs: a Backend is the op table the block dispatches through (ggml's backend interface
// is the model). It has
//  - memory: allocate (tensors in its MemorySpace), copy host <-> device, fill, and synchronize();
//  - every stage op (moe/ops.h), forward and backward, made for one configuration;
//  - the block's element-wise glue (the loss gradient, the f32 -> run dtype store) and a dense GEMM
//    (the ceiling every result is compared with, run through the same backend);
//  - supports(op, cfg): ok, or the reason it cannot run that op for cfg. The CLI and the block ask it
//    before anything is allocated; a make_* call for an unsupported op is an invariant failure.
//
// A run makes its backend for its KernelConfig (make_backend) and owns it: the backend owns what its
// kernels keep (the cpu backend's GEMM kernel table and auto's tuning), and everything that multiplies
// in that run, the dense ceiling included, goes through that one instance.
//
// Registered backends: `cpu` (OpenMP + oneDNN, the default), `ref` (plain scalar loops with float64
// accumulation: every op's specification, slow) and, when built with CUDA, `cuda`. How a new backend,
// quant mode or comm path plugs in: docs/design.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/config.h"
#include "moe/ops.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {

// What a run reads from its backend's GEMM kernel table, where auto's tuning and choices live.
class KernelTableReport {
 public:
  virtual ~KernelTableReport() = default;
  // Per GEMM form, the kernel variants that ran since the last call ("nn:dpbf16,tn_pair:onednn"): rows'
  // gemm_kernels.
  virtual std::string take_choices() = 0;
  // How many shape classes auto has measured so far (never inside a timed call: the harness checks).
  virtual int64_t measurements() const = 0;
};

class Backend {
 public:
  explicit Backend(KernelConfig kernel) : kernel_(std::move(kernel)) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // The kernel configuration it was made for (--gemm-variant, thresholds, threads, auto's tuning file).
  const KernelConfig& kernel() const { return kernel_; }
  virtual const char* name() const = 0;
  // One line: what computes, and on which device (e.g. the GPU's name, or why there is none).
  virtual std::string description() const = 0;
  // The devices it computes on, in the seed's `devices=[...]` style, e.g. "CpuDevice(id=0)".
  virtual std::string devices() const = 0;
  // The hardware that computes, for result rows (`device_model`): the CPU's model name by default, a GPU
  // backend's GPU ("NVIDIA H200 (sm_90, 139 GiB)"), so rows from different devices are never confused.
  virtual std::string device_model() const;

  // Ok when its device is there to compute on; else why not (e.g. "no CUDA device (...)"). Nothing of
  // a backend that is not available may be touched but its names and these answers.
  virtual Status available() const { return Status::ok(); }

  // Memory.
  virtual MemorySpace& memory() = 0;
  Tensor empty(Dtype dtype, std::vector<int64_t> shape) { return Tensor(dtype, std::move(shape), memory()); }
  Tensor to_device(const Tensor& t) { return t.to_memory(memory()); }
  // Waits until every op enqueued on this backend has finished (a no-op for synchronous backends).
  virtual void synchronize() = 0;

  virtual Status supports(OpKind op, const MoeConfig& cfg) const = 0;
  // Every op a block of cfg uses (the shared expert only when cfg has one); the first refusal.
  Status supports_block(const MoeConfig& cfg) const;

  // Stage ops. REQUIRES: supports(op, ctx.cfg) is ok. The expert FFN op is chosen by cfg.quant_mode.
  virtual std::unique_ptr<PackOp> make_pack(const OpContext& ctx) = 0;
  virtual std::unique_ptr<DispatchOp> make_dispatch(const OpContext& ctx) = 0;
  virtual std::unique_ptr<ExpertFfnOp> make_expert_ffn(const OpContext& ctx) = 0;
  virtual std::unique_ptr<CombineOp> make_combine(const OpContext& ctx) = 0;
  virtual std::unique_ptr<SharedExpertOp> make_shared_expert(const OpContext& ctx) = 0;

  // loss = mean(y^2) (the seed's) over `count` elements, of which y holds some (all on one rank; a
  // token slice on a rank of a parallel run): dy (T, H) f32 = 2 y / count, sum_sq (1) f64 = sum of y^2
  // of y (T, H).
  virtual void loss_backward(Tensor& dy, Tensor& sum_sq, const Tensor& y, int64_t count) = 0;
  // dst = src converted element-wise (float dtypes; narrowing rounds to nearest even). Same numel.
  virtual void convert(Tensor& dst, const Tensor& src) = 0;
  // c (R, N) = a (R, Kd) @ b, all in one dtype, f32 accumulation: the dense ceiling. b is stored
  // (Kd, N), or (N, Kd) when trans_b (the ceiling times whichever layout is faster).
  virtual void dense_gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) = 0;
  // The dtype its GEMMs multiply `storage` values in: storage itself, or float32 where bf16 values are
  // widened because the device has no bf16 arithmetic (an AVX2 CPU). The ceiling is then timed on
  // float32 inputs: the fastest dense GEMM this machine offers for that data.
  virtual Dtype gemm_arithmetic(Dtype storage) const { return storage; }

  // Its GEMM kernel table (nullptr: a backend without one).
  virtual KernelTableReport* kernel_table() { return nullptr; }

 private:
  KernelConfig kernel_;
};

// Its kernel table's take_choices() ("" for a backend without a table) and measurements() (0).
std::string take_kernel_choices(Backend& backend);
int64_t kernel_measurements(Backend& backend);

// The registered backends' names, in `--list` order (cpu first: the default).
const std::vector<std::string>& registered_backend_names();
// "cpu, ref, cuda": for error messages.
std::string backend_names();
// A new backend of that name for `kernel`; nullptr for an unknown name. REQUIRES:
// check_kernel_config(kernel).
std::unique_ptr<Backend> make_backend(const std::string& name, const KernelConfig& kernel = {});
// Ok where every backend can be made for `kernel` (a known --gemm-variant that runs here, valid
// thresholds); else the one line for the user.
Status check_kernel_config(const KernelConfig& kernel);

// The reason text of supports() for an op a backend does not implement yet.
Status not_implemented(const Backend& backend, OpKind op);
// supports() of a backend with every op whose expert FFN op is the float one only (quant_mode none):
// the refusal every int8 mode gets until its op is registered there.
Status every_op_float_expert_ffn(const Backend& backend, OpKind op, const MoeConfig& cfg);

}  // namespace moe
