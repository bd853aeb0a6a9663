// The quantization reference (moe/quantize.h): plain loops, one block at a time.
#include "moe/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <vector>

#include "moe/status.h"

namespace moe::ref_quant {
namespace {

float load(const void* p, Dtype dt, int64_t i) {
  MOE_CHECK(is_run_dtype(dt),
            std::string("quantize reads float32, bfloat16 or float16, not ") + dtype_name(dt));
  return float(float_value(p, dt, i));
}

}  // namespace

void quantize_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t rows, int64_t cols, int64_t ld_x,
                   bool transposed) {
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(load(x, dt, r * ld_x + c)));
    scale[r] = quant_scale(amax);
    for (int64_t c = 0; c < cols; ++c)
      q[transposed ? c * rows + r : r * cols + c] = quantize_value(load(x, dt, r * ld_x + c), scale[r]);
  }
}

void quantize_experts(int8_t* q, float* scale, ExpertWeights w, Dtype dt, int64_t E, int64_t Kd, int64_t N,
                      bool transposed) {
  MOE_CHECK(N % w.parts() == 0, "quantize_experts: two weight parts split N in halves");
  const int64_t part_cols = N / w.parts();
  auto value = [&](int64_t e, int64_t k, int64_t n) {
    return load(w.part(int(n / part_cols)), dt, (e * Kd + k) * part_cols + n % part_cols);
  };
  for (int64_t e = 0; e < E; ++e) {
    float amax = 0;
    for (int64_t k = 0; k < Kd; ++k)
      for (int64_t n = 0; n < N; ++n) amax = std::max(amax, std::fabs(value(e, k, n)));
    scale[e] = quant_scale(amax);
    for (int64_t k = 0; k < Kd; ++k)
      for (int64_t n = 0; n < N; ++n)
        q[e * Kd * N + (transposed ? n * Kd + k : k * N + n)] = quantize_value(value(e, k, n), scale[e]);
  }
}

void quantize_columns(int8_t* q, float* scale, const void* w, Dtype dt, int64_t Kd, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < Kd; ++k) amax = std::max(amax, std::fabs(load(w, dt, k * N + n)));
    scale[n] = quant_scale(amax);
    for (int64_t k = 0; k < Kd; ++k) q[k * N + n] = quantize_value(load(w, dt, k * N + n), scale[n]);
  }
}

void quantize_token_rows(int8_t* q, float* scale, const void* x, Dtype dt, int64_t tokens, int64_t topk,
                         int64_t cols, const int32_t* assignment_row) {
  // Every row a token has is quantized from that token's first row (the seed quantizes x per token).
  std::map<int64_t, int64_t> source_of_row;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t first = -1;
    for (int64_t k = 0; k < topk; ++k)
      if (const int64_t r = assignment_row[t * topk + k]; r >= 0)
        source_of_row[r] = first < 0 ? (first = r) : first;
  }
  const auto* bytes = static_cast<const std::byte*>(x);
  for (const auto& [row, source] : source_of_row)
    quantize_rows(q + row * cols, scale + row, bytes + size_t(source * cols) * dtype_size(dt), dt, 1, cols,
                  cols);
}

}  // namespace moe::ref_quant
