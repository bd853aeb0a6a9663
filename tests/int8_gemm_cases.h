// The int8 GEMM tests' inputs, cases and check (nn_s8, moe/gemm.h), shared by the kernel table's suite
// (tests/test_int8_gemm.cpp) and the amx kernel's emulated instance (tests/test_gemm_amx.cpp): random
// symmetric int8 operands and scales, odd sizes and tails of every width a kernel may block by, empty
// experts, padding rows, per-expert and per-column weight scales, float32 and bf16 outputs, accumulation,
// each against the reference's exact integer sums bit for bit (the dequantization is the same float32
// steps, so nothing may differ).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "moe/gemm.h"
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

}  // namespace moe::int8_test
