// SwiGLU's pointwise math in float64 (the expert FFN and shared expert refs apply it per element):
// g = silu(a) * b, da = dg * b * silu'(a), db = dg * silu(a).
#include <cmath>

#include "ref/ref.h"

namespace moe::ref {

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}

double silu_grad(double z) {
  const double s = 1.0 / (1.0 + std::exp(-z));
  return s * (1.0 + z * (1.0 - s));
}

}  // namespace moe::ref
