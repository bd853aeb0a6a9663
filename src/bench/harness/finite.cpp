#include "bench/harness/finite.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

namespace moe::bench {

namespace {

// How many of n 16-bit values have all of `exp_mask`'s exponent bits set (inf or NaN).
int64_t count_all_ones_exponent(const uint16_t* v, int64_t n, uint16_t exp_mask) {
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) bad += (v[i] & exp_mask) == exp_mask;
  return bad;
}

}  // namespace

int64_t count_non_finite(const Tensor& t) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case Dtype::f32: {
      const float* v = t.data<float>();
      int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (1 << 16))
      for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(v[i]);
      return bad;
    }
    case Dtype::bf16:  // the top half of a float32
      return count_all_ones_exponent(t.data<bf16_t>(), n, 0x7f80);
    case Dtype::f16:  // 5 exponent bits: a value past 65504 rounds to inf
      return count_all_ones_exponent(t.data<uint16_t>(), n, 0x7c00);
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("count_non_finite: a run dtype, not ") + dtype_name(t.dtype()));
}

Status check_finite(const Tensor& out, const MoeGrads* grads) {
  std::vector<std::pair<const char*, const Tensor*>> tensors = {{"out", &out}};
  if (grads)
    tensors.insert(tensors.end(), {{"grad_x", &grads->dx},
                                   {"grad_w1", &grads->dw1},
                                   {"grad_w2", &grads->dw2},
                                   {"grad_w3", &grads->dw3},
                                   {"grad_shared_w1", &grads->dsw1},
                                   {"grad_shared_w2", &grads->dsw2},
                                   {"grad_shared_w3", &grads->dsw3}});
  std::string bad;
  for (auto [name, t] : tensors)
    if (const int64_t n = count_non_finite(*t); n > 0)
      bad += fmt::format("{}{} ({} of {} values)", bad.empty() ? "" : ", ", name, n, t->numel());
  if (bad.empty()) return Status::ok();
  return Status::error("non-finite values (NaN or inf) in " + bad + "; no RESULT printed");
}

}  // namespace moe::bench
