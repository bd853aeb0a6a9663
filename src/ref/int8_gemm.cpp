// The int8 GEMM reference (cpu/gemm/gemm.h, nn_s8): exact integer sums (int64, so no kernel's int32 can
// hide an overflow behind a matching one), dequantized in float32 in the seed's order. FBGEMM's
// matmul_u8i8acc32_ref is the model. Every int8 kernel must equal it bit for bit.
#include <cstring>
#include <vector>

#include "moe/quantize.h"
#include "moe/status.h"
#include "ref/gemm.h"
#include "ref/ref.h"

namespace moe::ref_gemm {

void grouped_gemm_nn_s8(const GemmThresholds&, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(is_run_dtype(out_dtype), "ref nn_s8: a float32, bfloat16 or float16 out");
  MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "ref nn_s8: accumulates in a float32 out only");
  std::vector<int64_t> sum(static_cast<size_t>(N));
  for (int64_t e = 0; e < groups.experts; ++e) {
    const int64_t row0 = groups.group_offset[e], rows = groups.group_offset[e + 1] - row0;
    const int64_t live = groups.live_rows ? groups.live_rows[e] : rows;
    MOE_CHECK(rows >= 0 && live >= 0 && live <= rows, "ref nn_s8: a group's live rows must fit in it");
    const int8_t* w = in.rhs + e * Kd * N;
    for (int64_t r = row0; r < row0 + rows; ++r) {
      std::fill(sum.begin(), sum.end(), 0);
      if (r < row0 + live)
        for (int64_t k = 0; k < Kd; ++k) {
          const int64_t a = in.lhs[r * Kd + k];
          MOE_CHECK(a != -128, "nn_s8: -128 is not a symmetric int8 value");
          for (int64_t n = 0; n < N; ++n) sum[size_t(n)] += a * w[k * N + n];
        }
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = r * N + n;
        if (r >= row0 + live) {  // padding rows: zeros, left alone when accumulating
          if (!accumulate) set_float_value(out, out_dtype, i, 0.0f);
          continue;
        }
        MOE_CHECK(sum[size_t(n)] >= INT32_MIN && sum[size_t(n)] <= INT32_MAX,
                  "nn_s8: the sum overflows int32");
        const float rs = in.rhs_scale[in.rhs_scale_per_column ? e * N + n : e];
        const float v = float(float(sum[size_t(n)]) * in.lhs_scale[r]) * rs;
        set_float_value(out, out_dtype, i, accumulate ? static_cast<float*>(out)[i] + v : v);
      }
    }
  }
}

void grouped_gemm_nn_s8_swiglu(const GemmThresholds& k, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                               Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M,
                               const float* row_weight) {
  const int64_t rows = groups.group_offset[groups.experts];
  const size_t elem = dtype_size(out_dtype);
  // h's gate and up columns: the one [gate | up] tensor's, or each part's.
  std::vector<std::byte> part(size_t(rows * (up.rhs ? M : 2 * M)) * elem);
  for (int p = 0; p < (up.rhs ? 2 : 1); ++p) {
    Int8Operands one = in;
    if (p) {
      one.rhs = up.rhs;
      one.rhs_scale = up.rhs_scale;
    }
    const int64_t width = up.rhs ? M : 2 * M;
    grouped_gemm_nn_s8(k, part.data(), out_dtype, one, groups, Kd, width, false);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<std::byte*>(out.h) + size_t(r * 2 * M + p * M) * elem,
                  part.data() + size_t(r * width) * elem, size_t(width) * elem);
  }
  auto load = [&](int64_t i) { return float_value(out.h, out_dtype, i); };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < M; ++j) {
      // From h as stored, rounded once to out_dtype.
      const double g =
          ref::silu(load(r * 2 * M + j)) * load(r * 2 * M + M + j) * (row_weight ? row_weight[r] : 1.0);
      set_float_value(out.g, out_dtype, r * M + j, float(g));
    }
  ref_quant::quantize_rows(out.gq, out.g_scale, out.g, out_dtype, rows, M, M);
}

}  // namespace moe::ref_gemm
