#include "bench/harness/finite.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

namespace moe::bench {

int64_t count_non_finite(const Tensor& t) {
  const int64_t n = t.numel();
  int64_t bad = 0;
  if (t.dtype() == Dtype::f32) {
    const float* v = t.data<float>();
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(v[i]);
  } else {
    // bf16 is the top half of a float32: all-ones exponent bits mean inf or NaN.
    const bf16_t* v = t.data<bf16_t>();
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) bad += (v[i] & 0x7f80) == 0x7f80;
  }
  return bad;
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
