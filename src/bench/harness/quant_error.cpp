#include "bench/harness/quant_error.h"

#include <algorithm>

#include "moe/block.h"
#include "moe/parallel.h"
#include "moe/reference.h"

namespace moe::bench {
namespace {

std::vector<const Tensor*> grad_tensors(const MoeGrads& g) {
  return {&g.dx, &g.dw1, &g.dw3, &g.dw2, &g.dsw1, &g.dsw3, &g.dsw2};
}

}  // namespace

Status global_results(Comm& comm, const MoeConfig& c, const Tensor& out, const MoeGrads* grads,
                      Tensor& global_out, std::optional<MoeGrads>& global_grads) {
  global_grads.reset();
  if (comm.size() == 1) {
    global_out = out;
    if (grads) global_grads = *grads;
    return Status::ok();
  }
  MoeGrads gathered;
  MOE_RETURN_IF_ERROR(gather_results(comm, c, out, grads, global_out, grads ? &gathered : nullptr));
  if (grads) global_grads = std::move(gathered);
  return Status::ok();
}

Status float_results(FloatResults& f, const MoeConfig& c, Backend& backend, Comm& comm, const MoeInputs& in,
                     const RoutingTensors& routing) {
  MOE_CHECK(c.quant_mode != QuantMode::none, "float_results: a quant run");
  MoeConfig fc = c;
  fc.quant_mode = QuantMode::none;
  MoeBlock block(fc, backend, comm);
  const MoeConfig rc = rank_config(fc, block.layout());
  Tensor out = backend.empty(c.dtype, {rc.tokens, c.hidden});
  std::optional<MoeGrads> grads;
  if (c.bench_pass == BenchPass::forward_backward) {
    grads = make_grads(rc, backend.memory());
    MOE_RETURN_IF_ERROR(block.forward_backward(out, *grads, in, routing));
  } else {
    MOE_RETURN_IF_ERROR(block.forward(out, in, routing));
  }
  backend.synchronize();
  std::optional<MoeGrads> host_grads;
  if (grads) host_grads = to_host(*grads);
  Tensor global_out;
  std::optional<MoeGrads> global_grads;
  MOE_RETURN_IF_ERROR(
      global_results(comm, c, out.to_host(), host_grads ? &*host_grads : nullptr, global_out, global_grads));
  if (comm.rank() != 0) return Status::ok();
  f.out = global_out.to_f64();
  if (global_grads)
    for (const Tensor* g : grad_tensors(*global_grads)) f.grads.push_back(g->to_f64());
  return Status::ok();
}

QuantError quant_error(const FloatResults& f, const Tensor& global_out, const MoeGrads* global_grads) {
  QuantError e;
  e.out_rel_err = relative_error(global_out.to_f64(), f.out);
  if (global_grads && !f.grads.empty()) {
    double worst = 0;
    const std::vector<const Tensor*> got = grad_tensors(*global_grads);
    for (size_t i = 0; i < got.size(); ++i)
      if (!f.grads[i].empty()) worst = std::max(worst, relative_error(got[i]->to_f64(), f.grads[i]));
    e.grad_rel_err = worst;
  }
  return e;
}

}  // namespace moe::bench
