#include "bench/quant_error.h"

#include <algorithm>

#include "moe/block.h"
#include "moe/reference.h"

namespace moe::bench {
namespace {

std::vector<const Tensor*> grad_tensors(const MoeGrads& g) {
  return {&g.dx, &g.dw1, &g.dw3, &g.dw2, &g.dsw1, &g.dsw3, &g.dsw2};
}

}  // namespace

FloatResults float_results(const MoeConfig& c, const KernelConfig& k, Backend& backend, Comm& comm,
                           const MoeInputs& in, const RoutingTensors& routing) {
  MOE_CHECK(c.quant_mode != QuantMode::none && comm.size() == 1, "float_results: a quant run on one rank");
  MoeConfig fc = c;
  fc.quant_mode = QuantMode::none;
  MoeBlock block(fc, k, backend, comm);
  Tensor out = backend.empty(c.dtype, {c.tokens, c.hidden});
  FloatResults f;
  if (c.bench_pass == BenchPass::forward_backward) {
    MoeGrads grads = make_grads(fc, backend.memory());
    MOE_CHECK(block.forward_backward(out, grads, in, routing).is_ok(), "the float run of a quant run failed");
    backend.synchronize();
    for (const Tensor* g : grad_tensors(grads)) f.grads.push_back(g->to_host().to_f64());
  } else {
    MOE_CHECK(block.forward(out, in, routing).is_ok(), "the float run of a quant run failed");
    backend.synchronize();
  }
  f.out = out.to_host().to_f64();
  return f;
}

QuantError quant_error(const FloatResults& f, const Tensor& host_out, const MoeGrads* host_grads) {
  QuantError e;
  e.out_rel_err = relative_error(host_out.to_f64(), f.out);
  if (host_grads && !f.grads.empty()) {
    double worst = 0;
    const std::vector<const Tensor*> got = grad_tensors(*host_grads);
    for (size_t i = 0; i < got.size(); ++i)
      if (!f.grads[i].empty()) worst = std::max(worst, relative_error(got[i]->to_f64(), f.grads[i]));
    e.grad_rel_err = worst;
  }
  return e;
}

}  // namespace moe::bench
