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

const std::vector<Backend*>& registered_backends() {
  static const std::vector<Backend*> backends = {
      &cpu::cpu_backend(), &ref::ref_backend(),
#ifdef MOE_HAVE_CUDA
      &cuda_module_backend(),  // opened when first asked (registry/cuda_module.h)
#endif
  };
  return backends;
}

Backend* backend_by_name(const std::string& name) {
  for (Backend* b : registered_backends())
    if (name == b->name()) return b;
  return nullptr;
}

std::string backend_names() {
  std::string names;
  for (Backend* b : registered_backends()) names += (names.empty() ? "" : ", ") + std::string(b->name());
  return names;
}

}  // namespace moe
