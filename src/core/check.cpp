// --check in one place: the fixed per-dtype floor (moe/check.h) and the conditioned rule that raises it
// where a problem is ill-conditioned (moe/conditioned_check.h), both against the float64 reference.
#include "moe/check.h"

#include <algorithm>
#include <cmath>

#include "moe/conditioned_check.h"
#include "moe/reference.h"
#include "moe/rng.h"

namespace moe {
namespace {

// Twice the unit roundoff of a run dtype: the relative size of one rounding step.
double unit_roundoff_x2(Dtype dt) {
  switch (dt) {
    case Dtype::bf16:
      return 0x1p-8;
    case Dtype::f16:
      return 0x1p-11;  // 10 fraction bits: 8x finer than bf16's 7
    case Dtype::f32:
      return 0x1p-23;
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("no --check rounding step for run dtype ") + dtype_name(dt));
}

// The reference's tensors in check order; empty shared tensors (S = 0) are skipped by the caller.
std::vector<std::pair<const char*, const std::vector<double>*>> reference_tensors(const ReferenceResult& r) {
  std::vector<std::pair<const char*, const std::vector<double>*>> t = {{"out", &r.out}};
  if (r.has_grads)
    t.insert(t.end(), {{"grad_x", &r.dx},
                       {"grad_w1", &r.dw1},
                       {"grad_w3", &r.dw3},
                       {"grad_w2", &r.dw2},
                       {"grad_shared_w1", &r.dsw1},
                       {"grad_shared_w3", &r.dsw3},
                       {"grad_shared_w2", &r.dsw2}});
  return t;
}

// Every parameter value scaled by (1 + u * r), r uniform in [-1, 1], from a stream of its own.
ReferenceParams perturbed(ReferenceParams p, double u, uint64_t key) {
  uint64_t counter = 0;
  for (std::vector<double>* v : {&p.x, &p.w1, &p.w3, &p.w2, &p.sw1, &p.sw3, &p.sw2})
    for (double& value : *v) value *= 1.0 + u * (2.0 * random_uniform(key, counter++) - 1.0);
  return p;
}

}  // namespace

double conditioning_factor(int64_t tokens) {
  return kConditioningFactor * std::max(1.0, std::sqrt(double(kShortAccumulation) / double(tokens)));
}

ConditionedCheck check_conditioned(const MoeConfig& cfg, const MoeInputs& in, const Routing& routing,
                                   const Tensor& out, const MoeGrads* grads) {
  const ReferenceParams params = reference_params(in);
  const ReferenceResult ref = reference_forward(cfg, params, routing, grads != nullptr);
  const auto refs = reference_tensors(ref);
  std::vector<const Tensor*> fast = {&out};
  if (grads)
    fast.insert(fast.end(), {&grads->dx, &grads->dw1, &grads->dw3, &grads->dw2, &grads->dsw1, &grads->dsw3,
                             &grads->dsw2});

  ConditionedCheck r;
  const double floor = check_tolerance(cfg);
  bool over_floor = false;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].second->empty()) continue;
    r.tensors.push_back({refs[i].first, relative_error(fast[i]->to_f64(), *refs[i].second), 0.0, floor});
    over_floor |= r.tensors.back().rel_err > floor;
  }
  if (over_floor) {
    // Measure each tensor's sensitivity to rounding-sized noise in the inputs (see the header).
    const double u = unit_roundoff_x2(cfg.dtype);
    std::vector<double> sensitivity(refs.size(), 0.0);
    for (int trial = 0; trial < kPerturbations; ++trial) {
      const uint64_t key = derive_key(derive_key(uint64_t(cfg.seed), kStreamCheck), uint64_t(trial));
      const ReferenceResult moved =
          reference_forward(cfg, perturbed(params, u, key), routing, grads != nullptr);
      const auto moved_tensors = reference_tensors(moved);
      for (size_t i = 0; i < refs.size(); ++i)
        if (!refs[i].second->empty())
          sensitivity[i] =
              std::max(sensitivity[i], relative_error(*moved_tensors[i].second, *refs[i].second));
    }
    const double factor = conditioning_factor(cfg.tokens);
    size_t t = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (refs[i].second->empty()) continue;
      r.tensors[t].sensitivity = sensitivity[i];
      r.tensors[t++].tol = std::max(floor, factor * sensitivity[i]);
    }
  }

  r.pass = true;
  double worst_ratio = -1;
  for (const TensorCheck& t : r.tensors) {
    r.pass &= t.rel_err <= t.tol;
    if (t.name == "out")
      r.out_rel_err = t.rel_err;
    else
      r.grad_rel_err = std::max(r.grad_rel_err, t.rel_err);
    if (t.rel_err / t.tol > worst_ratio) {
      worst_ratio = t.rel_err / t.tol;
      r.worst = t;
    }
  }
  return r;
}

double check_tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::f32:
      return 1e-5;
    case Dtype::bf16:
      return 2e-2;
    case Dtype::f16:
      return 2.5e-3;  // bf16's floor / 8, as its rounding step
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
