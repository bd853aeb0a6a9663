// The int8 GEMM reference (moe/gemm.h, nn_s8): exact integer sums (int64, so no kernel's int32 can
// hide an overflow behind a matching one), dequantized in float32 in the seed's order. FBGEMM's
// matmul_u8i8acc32_ref is the model. Every int8 kernel must equal it bit for bit.
#include <vector>

#include "moe/status.h"
#include "ref/gemm.h"

namespace moe::ref_gemm {

void grouped_gemm_nn_s8(const GemmThresholds&, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "ref nn_s8: float32 or bfloat16 out");
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
          if (!accumulate)
            out_dtype == Dtype::f32 ? void(static_cast<float*>(out)[i] = 0.0f)
                                    : void(static_cast<bf16_t*>(out)[i] = 0);
          continue;
        }
        MOE_CHECK(sum[size_t(n)] >= INT32_MIN && sum[size_t(n)] <= INT32_MAX,
                  "nn_s8: the sum overflows int32");
        const float rs = in.rhs_scale[in.rhs_scale_per_column ? e * N + n : e];
        const float v = float(float(sum[size_t(n)]) * in.lhs_scale[r]) * rs;
        if (out_dtype == Dtype::bf16)
          static_cast<bf16_t*>(out)[i] = f32_to_bf16(v);
        else
          static_cast<float*>(out)[i] = accumulate ? static_cast<float*>(out)[i] + v : v;
      }
    }
  }
}

}  // namespace moe::ref_gemm
