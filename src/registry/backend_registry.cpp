// The backend registry: adding a backend is its own folder of files plus one line here.
#include <fmt/format.h>

#include "cpu/backend.h"
#include "moe/backend.h"
#include "moe/cpu_isa.h"
#include "ref/backend.h"
#ifdef MOE_HAVE_CUDA
#include "registry/cuda_module.h"
#endif

namespace moe {

const char* name(OpKind op) {
  switch (op) {
    case OpKind::pack:
      return "pack";
    case OpKind::dispatch:
      return "dispatch";
    case OpKind::expert_ffn:
      return "expert_ffn";
    case OpKind::combine:
      return "combine";
    case OpKind::shared_expert:
      return "shared_expert";
    case OpKind::convert:
      return "convert";
    case OpKind::loss:
      return "loss";
    case OpKind::dense_gemm:
      return "dense_gemm";
  }
  MOE_CHECK(false, "unknown op");
}

void synchronize(Backend* backend) {
  if (backend) backend->synchronize();
}

std::string Backend::device_model() const {
  return cpu_isa().model;
}

Status Backend::supports_block(const MoeConfig& cfg) const {
  for (OpKind op : {OpKind::pack, OpKind::dispatch, OpKind::expert_ffn, OpKind::combine, OpKind::convert,
                    OpKind::loss, OpKind::shared_expert}) {
    if (op == OpKind::shared_expert && !cfg.has_shared()) continue;
    if (op == OpKind::loss && cfg.bench_pass != BenchPass::forward_backward) continue;
    if (Status s = supports(op, cfg); !s)
      return Status::error(fmt::format("--device {} cannot run this block: {}", name(), s.message()));
  }
  return Status::ok();
}

Status not_implemented(const Backend& backend, OpKind op) {
  return Status::error(fmt::format("op {} is not implemented yet on backend {}", name(op), backend.name()));
}

Status every_op_float_expert_ffn(const Backend& backend, OpKind op, const MoeConfig& cfg) {
  switch (op) {
    case OpKind::expert_ffn:
      if (cfg.impl == Impl::ref_dp)
        return Status::error(fmt::format(
            "--impl ref_dp (the seed's DP baseline's expert MLP) is not implemented on backend {}",
            backend.name()));
      break;
    case OpKind::pack:
    case OpKind::dispatch:
    case OpKind::combine:
    case OpKind::shared_expert:
    case OpKind::convert:
    case OpKind::loss:
    case OpKind::dense_gemm:
      return Status::ok();
  }
  switch (cfg.quant_mode) {
    case QuantMode::none:
      return Status::ok();
    case QuantMode::int8:
    case QuantMode::int8_routed:
    case QuantMode::int8_all:
    case QuantMode::int8_routed_prequant:
      break;
  }
  return Status::error(fmt::format("--quant-mode {} is not implemented yet on backend {} (only 'none')",
                                   name(cfg.quant_mode), backend.name()));
}

namespace {

struct Registered {
  const char* name;
  std::unique_ptr<Backend> (*make)(const KernelConfig& kernel);
};

std::unique_ptr<Backend> make_cpu(const KernelConfig& kernel) {
  return std::make_unique<cpu::CpuBackend>(kernel);
}

constexpr Registered kBackends[] = {
    {"cpu", &make_cpu},
    {"ref", &ref::make_ref_backend},
#ifdef MOE_HAVE_CUDA
    {"cuda", &make_cuda_module_backend},  // its module opened when first asked (registry/cuda_module.h)
#endif
};

}  // namespace

std::string take_kernel_choices(Backend& backend) {
  KernelTableReport* table = backend.kernel_table();
  return table ? table->take_choices() : "";
}

int64_t kernel_measurements(Backend& backend) {
  KernelTableReport* table = backend.kernel_table();
  return table ? table->measurements() : 0;
}

const std::vector<std::string>& registered_backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Registered& r : kBackends) v.push_back(r.name);
    return v;
  }();
  return names;
}

std::string backend_names() {
  std::string names;
  for (const std::string& n : registered_backend_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const KernelConfig& kernel) {
  MOE_CHECK(check_kernel_config(kernel).is_ok(), "make_backend: a kernel configuration the CLI checked");
  for (const Registered& r : kBackends)
    if (name == r.name) return r.make(kernel);
  return nullptr;
}

Status check_kernel_config(const KernelConfig& kernel) {
  MOE_RETURN_IF_ERROR(check_gemm_variant(kernel.gemm_variant));
  return kernel.thresholds.validate();
}

}  // namespace moe
