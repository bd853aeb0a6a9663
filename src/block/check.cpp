#include "moe/check.h"

#include <algorithm>

#include "moe/reference.h"

namespace moe {

double check_tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::f32:
      return 1e-5;
    case Dtype::bf16:
      return 2e-2;
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("no --check tolerance for run dtype ") + dtype_name(dtype));
}

double check_tolerance(const MoeConfig& cfg) {
  const double floor = check_tolerance(cfg.dtype);
  return any_int8_gemm(cfg) ? std::max(floor, kInt8CheckTolerance) : floor;
}

CheckResult check_against_reference(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                    const Tensor& out, const MoeGrads* grads) {
  ReferenceResult ref = reference_forward(cfg, in, routing, grads != nullptr);
  CheckResult r;
  r.tol = check_tolerance(cfg);
  r.out_rel_err = relative_error(out.to_f64(), ref.out);
  if (grads) {
    r.grad_rel_err = std::max(
        {relative_error(grads->dx.to_f64(), ref.dx), relative_error(grads->dw1.to_f64(), ref.dw1),
         relative_error(grads->dw3.to_f64(), ref.dw3), relative_error(grads->dw2.to_f64(), ref.dw2)});
    if (cfg.has_shared())
      r.grad_rel_err = std::max({r.grad_rel_err, relative_error(grads->dsw1.to_f64(), ref.dsw1),
                                 relative_error(grads->dsw3.to_f64(), ref.dsw3),
                                 relative_error(grads->dsw2.to_f64(), ref.dsw2)});
  }
  r.pass = r.out_rel_err <= r.tol && r.grad_rel_err <= r.tol;
  return r;
}

}  // namespace moe
