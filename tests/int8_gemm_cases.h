// The int8 GEMM tests' inputs, cases and check (nn_s8, cpu/gemm/gemm.h), shared by the kernel table's suite
// (tests/test_int8_gemm.cpp) and the amx kernel's emulated instance (tests/test_gemm_amx.cpp): random
// symmetric int8 operands and scales, odd sizes and tails of every width a kernel may block by, empty
// experts, padding rows, per-expert and per-column weight scales, float32 and bf16 outputs, accumulation,
// each against the reference's exact integer sums bit for bit (the dequantization is the same float32
// steps, so nothing may differ).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "moe/quantize.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "ref/gemm.h"

namespace moe::int8_test {

inline std::vector<int8_t> random_s8(int64_t n, uint64_t key) {
  std::vector<int8_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int8_t(int64_t(random_bits(key, uint64_t(i)) % 255) - 127);
  return v;
}
inline std::vector<float> random_scales(int64_t n, uint64_t key) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::exp(random_normal(key, uint64_t(i)))) * 1e-3f;
  return v;
}

struct S8Case {
  const char* name;
  std::vector<int64_t> sizes;  // rows per group
  int64_t Kd, N;
};
// Odd sizes and tails of every width a kernel may block by (4, 8, 16, 32, 64 along Kd and N), empty
// experts, all rows in one, one row, Kd = 1, and a deep reduction whose sums approach int32's range.
inline const std::vector<S8Case> kS8Cases = {
    {"odd_with_empty", {3, 0, 17, 1, 63, 65}, 17, 63},
    {"all_rows_in_one", {0, 0, 37, 0}, 65, 3},
    {"rows_of_one", {1, 1, 1}, 63, 17},
    {"zero_rows", {0, 0}, 17, 65},
    {"kd_1", {9}, 1, 40},
    {"aligned", {64, 32}, 256, 128},
    {"tails", {67, 5}, 259, 131},
    {"blocks", {130, 200}, 34, 290},  // row blocks of 64 and column blocks of 128 with tails
    {"deep", {20}, 130000, 9},
};

// What one nn_s8 call of a case was (for a caller's own checks after it).
struct S8Call {
  const S8Case* c;
  int64_t experts;
  Dtype out_dtype;
  bool accumulate;
};
using NnS8 = std::function<void(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd,
                                int64_t N, bool accumulate)>;

// Every case, unpadded and padded (a third of each group's rows past its live ones), weight scales per
// expert and per column, float32 and bf16 out, float32 also accumulating: `nn_s8` equals the reference bit
// for bit; `after` runs after each call.
inline void check_nn_s8(uint64_t key, const NnS8& nn_s8,
                        const std::function<void(const S8Call&)>& after = {}) {
  const GemmThresholds defaults;
  for (const S8Case& c : kS8Cases)
    for (bool padded : {false, true})
      for (bool per_column : {false, true})
        for (Dtype out_dt : {Dtype::f32, Dtype::bf16})
          for (bool accumulate : {false, true}) {
            if (accumulate && out_dt != Dtype::f32) continue;
            SCOPED_TRACE(std::string(c.name) + (padded ? " padded" : "") + (per_column ? " per-column" : "") +
                         " out " + dtype_name(out_dt) + (accumulate ? " accumulate" : ""));
            std::vector<int64_t> offset{0}, live;
            for (int64_t s : c.sizes) {
              offset.push_back(offset.back() + s);
              live.push_back(padded ? s - s / 3 : s);
            }
            const int64_t E = int64_t(c.sizes.size()), rows = offset.back();
            const GroupedShape groups{offset.data(), E, padded ? live.data() : nullptr};
            const std::vector<int8_t> lhs = random_s8(rows * c.Kd, ++key),
                                      rhs = random_s8(E * c.Kd * c.N, ++key);
            const std::vector<float> ls = random_scales(rows, ++key),
                                     rs = random_scales(per_column ? E * c.N : E, ++key);
            const Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data(), per_column};
            Tensor got(out_dt, {rows, c.N}), want(out_dt, {rows, c.N});
            for (int64_t i = 0; i < got.numel(); ++i) {
              // accumulate adds to what is there (padding rows keep it); otherwise NaN shows an unwritten
              // element
              const float start = accumulate ? float(i % 7) - 3.0f : std::numeric_limits<float>::quiet_NaN();
              got.set(i, start);
              want.set(i, start);
            }
            nn_s8(got.raw(), out_dt, in, groups, c.Kd, c.N, accumulate);
            ref_gemm::grouped_gemm_nn_s8(defaults, want.raw(), out_dt, in, groups, c.Kd, c.N, accumulate);
            const size_t width = dtype_size(out_dt);
            for (int64_t i = 0; i < got.numel(); ++i)
              if (std::memcmp(static_cast<const char*>(got.raw()) + size_t(i) * width,
                              static_cast<const char*>(want.raw()) + size_t(i) * width, width) != 0) {
                FAIL() << "first difference at " << i << " (row " << i / c.N << "): " << got.get(i) << " vs "
                       << want.get(i);
              }
            if (after) after({&c, E, out_dt, accumulate});
          }
}

// The extremes: every product 127 * 127 or -127 * 127 over a deep reduction (the largest sums an int8
// GEMM meets), exactly.
inline void check_nn_s8_extremes(const NnS8& nn_s8) {
  const int64_t rows = 5, Kd = 4096 + 3, N = 20;
  std::vector<int8_t> lhs(static_cast<size_t>(rows * Kd)), rhs(size_t(Kd * N));
  for (int64_t i = 0; i < rows * Kd; ++i) lhs[size_t(i)] = (i / Kd) % 2 ? -127 : 127;
  for (int64_t i = 0; i < Kd * N; ++i) rhs[size_t(i)] = (i % N) % 3 ? 127 : -127;
  const std::vector<float> ls(size_t(rows), 1.0f), rs(1, 1.0f);
  const int64_t offset[] = {0, rows};
  std::vector<float> got(static_cast<size_t>(rows * N));
  nn_s8(got.data(), Dtype::f32, {lhs.data(), ls.data(), rhs.data(), rs.data()}, {offset, 1}, Kd, N, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < N; ++n) {
      const double want = double(Kd) * 127 * 127 * ((r % 2) ? -1 : 1) * ((n % 3) ? 1 : -1);
      ASSERT_EQ(double(got[size_t(r * N + n)]), double(float(want))) << r << "," << n;
    }
}

// ---- nn_s8_swiglu
// -------------------------------------------------------------------------------------------
struct S8SwigluCase {
  const char* name;
  std::vector<int64_t> sizes;  // rows per group
  int64_t Kd, M;
};
// M below, at and past every vector width (8, 16) with tails, empty experts, one row, an odd reduction.
inline const std::vector<S8SwigluCase> kS8SwigluCases = {
    {"odd_with_empty", {3, 0, 17, 1, 63}, 19, 21},
    {"narrow", {5, 40}, 64, 3},
    {"one_row", {1}, 7, 16},
    {"lanes", {49, 13}, 130, 32},
    {"all_rows_in_one", {0, 0, 97, 0}, 33, 41},
};

using NnS8Swiglu = std::function<void(S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up,
                                      GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight)>;

// Every case, unpadded and padded, one [gate | up] tensor and two parts, weight scales per expert and per
// column, float32 and bf16, with and without row weights: h equals the reference's bit for bit (nn_s8's
// exact sums and epilogue); g is silu(gate) * up * w of h as stored within its dtype's rounding (float32:
// 2e-6 of the row's largest value, for the sigmoid's approximation; bf16: that and one bf16 step of the
// value, where a float32 g a hair from float64's rounds to the neighbouring bf16); gq and g_scale are g's
// rows as the kernel stored them, quantized by the reference bit for bit; padding rows are zeros with a zero
// row's scale.
inline void check_nn_s8_swiglu(uint64_t key, const NnS8Swiglu& nn_s8_swiglu) {
  const GemmThresholds defaults;
  for (const S8SwigluCase& c : kS8SwigluCases)
    for (bool padded : {false, true})
      for (bool two_parts : {false, true})
        for (bool per_column : {false, true})
          for (Dtype dt : {Dtype::f32, Dtype::bf16})
            for (bool weighted : {false, true}) {
              SCOPED_TRACE(std::string(c.name) + (padded ? " padded" : "") + (two_parts ? " two parts" : "") +
                           (per_column ? " per-column" : "") + " " + dtype_name(dt) +
                           (weighted ? " row weights" : ""));
              std::vector<int64_t> offset{0}, live;
              for (int64_t s : c.sizes) {
                offset.push_back(offset.back() + s);
                live.push_back(padded ? s - s / 3 : s);
              }
              const int64_t E = int64_t(c.sizes.size()), rows = offset.back(), M = c.M;
              const GroupedShape groups{offset.data(), E, padded ? live.data() : nullptr, padded};
              const int64_t part_cols = two_parts ? M : 2 * M;
              const std::vector<int8_t> lhs = random_s8(rows * c.Kd, ++key),
                                        w0 = random_s8(E * c.Kd * part_cols, ++key),
                                        w1 = random_s8(E * c.Kd * M, ++key);
              const std::vector<float> ls = random_scales(rows, ++key),
                                       s0 = random_scales(per_column ? E * part_cols : E, ++key),
                                       s1 = random_scales(per_column ? E * M : E, ++key);
              std::vector<float> row_weight(static_cast<size_t>(rows));
              for (int64_t r = 0; r < rows; ++r) row_weight[size_t(r)] = 0.25f + float(r % 7) * 0.125f;
              const Int8Operands in{lhs.data(), ls.data(), w0.data(), s0.data(), per_column};
              const Int8UpPart up = two_parts ? Int8UpPart{w1.data(), s1.data()} : Int8UpPart{};
              Tensor h(dt, {rows, 2 * M}), g(dt, {rows, M}), want_h(dt, {rows, 2 * M}), want_g(dt, {rows, M});
              std::vector<int8_t> gq(size_t(rows * M), 99), want_gq(gq.size());
              std::vector<float> g_scale(size_t(rows), -1.0f), want_scale(g_scale.size());
              for (int64_t i = 0; i < h.numel(); ++i) h.set(i, std::numeric_limits<float>::quiet_NaN());
              for (int64_t i = 0; i < g.numel(); ++i) g.set(i, std::numeric_limits<float>::quiet_NaN());
              const float* rw = weighted ? row_weight.data() : nullptr;
              nn_s8_swiglu({h.raw(), g.raw(), gq.data(), g_scale.data()}, dt, in, up, groups, c.Kd, M, rw);
              ref_gemm::grouped_gemm_nn_s8_swiglu(
                  defaults, {want_h.raw(), want_g.raw(), want_gq.data(), want_scale.data()}, dt, in, up,
                  groups, c.Kd, M, rw);
              ASSERT_EQ(std::memcmp(h.raw(), want_h.raw(), h.bytes()), 0) << "h differs from nn_s8's";
              std::vector<int8_t> own_q(gq.size());
              std::vector<float> own_scale(g_scale.size());
              ref_quant::quantize_rows(own_q.data(), own_scale.data(), g.raw(), dt, rows, M, M);
              for (int64_t r = 0; r < rows; ++r) {
                double most = 0;
                for (int64_t j = 0; j < M; ++j) most = std::max(most, std::fabs(want_g.get(r * M + j)));
                for (int64_t j = 0; j < M; ++j) {
                  const double got = g.get(r * M + j), want = want_g.get(r * M + j);
                  const double tol = 2e-6 * most + (dt == Dtype::bf16 ? std::fabs(want) / 128 : 0.0);
                  ASSERT_LE(std::fabs(got - want), tol) << "g at row " << r << " column " << j;
                }
                ASSERT_EQ(std::memcmp(&g_scale[size_t(r)], &own_scale[size_t(r)], 4), 0)
                    << "g_scale of row " << r;
                ASSERT_EQ(std::memcmp(gq.data() + r * M, own_q.data() + r * M, size_t(M)), 0)
                    << "gq of row " << r;
              }
              for (int64_t e = 0; e < E; ++e)
                for (int64_t r = offset[size_t(e)] + (padded ? live[size_t(e)] : c.sizes[size_t(e)]);
                     r < offset[size_t(e) + 1]; ++r) {
                  EXPECT_EQ(g_scale[size_t(r)], FLT_MIN) << "padding row " << r;
                  for (int64_t j = 0; j < M; ++j) {
                    ASSERT_EQ(g.get(r * M + j), 0.0) << "padding row " << r;
                    ASSERT_EQ(gq[size_t(r * M + j)], 0) << "padding row " << r;
                  }
                }
            }
}

}  // namespace moe::int8_test
