// The int8 pieces of the quant modes: quantization (moe/quantize.h), the cpu backend's against the plain
// reference bit for bit, and every int8 GEMM of the kernel table (nn_s8, cpu/gemm/gemm.h) against the
// reference's exact integer sums, also bit for bit (the dequantization is the same float32 steps, so
// nothing may differ). Fresh random inputs each run; the seed is printed (MOE_TEST_SEED replays).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/gemm_s8.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/ops/quantize_isa.h"
#include "cpu/ops/transpose_s8.h"
#include "int8_gemm_cases.h"
#include "isa_instances.h"
#include "moe/cpu_isa.h"
#include "moe/quantize.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "ref/gemm.h"
#include "test_util.h"

namespace moe {
namespace {

using namespace int8_test;  // NOLINT(google-build-using-namespace): the shared cases

const GemmThresholds kDefaults;

// Normal values times a per-row/column magnitude spread (1e-3 .. 1e3), exact zeros and halfway points,
// so scales differ by block and rounding meets ties.
Tensor spread(Dtype dt, int64_t rows, int64_t cols, uint64_t key) {
  Tensor t(dt, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t i = uint64_t(r * cols + c);
      const double mag = std::pow(10.0, double(int64_t((r * 7 + c * 3) % 7) - 3));
      double v = random_normal(key, i) * mag;
      if (i % 13 == 0) v = 0.0;
      if (i % 17 == 0) v = (double((r + c) % 5) - 2.0) + 0.5;  // ties when a block's amax is 127-ish
      t.set(r * cols + c, float(v));
    }
  return t;
}

void expect_bytes_equal(const std::vector<int8_t>& a, const std::vector<int8_t>& b, const char* what) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && ++bad <= 5)
      ADD_FAILURE() << what << " q[" << i << "]: " << int(a[i]) << " vs " << int(b[i]);
  EXPECT_EQ(bad, 0) << what;
}
void expect_scales_equal(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << what << " scale " << i;
}

// Every value is within half a step of its dequantized value, never -128, and a block's largest value
// maps to +-127.
void expect_round_trip(const Tensor& x, const std::vector<int8_t>& q, const std::vector<float>& scale,
                       int64_t rows, int64_t cols, bool per_row) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = scale[size_t(per_row ? r : c)], v = x.get(r * cols + c);
      const int8_t qv = q[size_t(r * cols + c)];
      ASSERT_NE(qv, -128);
      ASSERT_LE(std::fabs(dequantize_value(qv, s) - v), 0.5f * s * (1 + 1e-4f)) << r << "," << c;
    }
}

// Each ISA level's instance of the cpu quantization this CPU reaches (cpu/ops/quantize_isa.h; the others
// SKIPPED with the reason), bit for bit the reference's.
const auto kQuantizeLevels = testing::isa_instances(
    &cpu::baseline_quantize_passes, &cpu::avx2_quantize_passes, &cpu::avx512_bf16_quantize_passes);
using QuantizeAt = testing::IsaInstanceTest<cpu::QuantizePasses>;

struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> scale;
};

// x's rows quantized by `passes`, which must equal the reference's bit for bit; returns the reference's.
QuantizedRows rows_equal_the_reference(const cpu::QuantizePasses& passes, const Tensor& x, int64_t rows,
                                       int64_t cols, bool transposed) {
  std::vector<int8_t> q(static_cast<size_t>(rows * cols)), qr(q.size());
  std::vector<float> s(static_cast<size_t>(rows)), sr(s.size());
  passes.rows(q.data(), s.data(), x.raw(), x.dtype(), rows, cols, cols, transposed);
  ref_quant::quantize_rows(qr.data(), sr.data(), x.raw(), x.dtype(), rows, cols, cols, transposed);
  expect_bytes_equal(q, qr, transposed ? "rows transposed" : "rows");
  expect_scales_equal(s, sr, "rows");
  return {qr, sr};
}

TEST_P(QuantizeAt, RowsMatchTheReferenceAndRoundTrip) {
  const uint64_t key = testing::test_seed();
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {64, 1000}, {130, 65}, {0, 9}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      Tensor x = spread(dt, rows, cols, key);
      if (rows > 2)
        for (int64_t c = 0; c < cols; ++c) x.set(2 * cols + c, 0.0f);  // an all-zero row
      for (bool transposed : {false, true}) {
        const auto [qr, sr] = rows_equal_the_reference(passes_, x, rows, cols, transposed);
        if (!transposed) expect_round_trip(x, qr, sr, rows, cols, true);
        if (rows > 2) {
          EXPECT_EQ(sr[2], FLT_MIN);  // a zero row: the smallest scale, zeros, no NaN
          for (int64_t c = 0; c < cols; ++c)
            EXPECT_EQ(qr[size_t(transposed ? c * rows + 2 : 2 * cols + c)], 0);
        }
      }
    }
}

// Rows whose values sit on and a few ulps around half steps of their row's scale (x = (k + 0.5) * scale
// for k in [-127, 126]), among spread ones: the cpu multiplies by the scale's reciprocal where that rounds
// as the reference's division does, and must divide exactly where it may not.
Tensor near_half_steps(Dtype dt, int64_t rows, int64_t cols, uint64_t key) {
  Tensor t(dt, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    // bf16 holds (k + 0.5) * 2^-m exactly; float32 takes any scale.
    const double amax = dt == Dtype::bf16 ? 127.0 * std::ldexp(1.0, -int(r % 9))
                                          : 127.0 * std::exp(6.0 * random_uniform(key, uint64_t(r)) - 3.0);
    t.set(r * cols, float(amax));
    const float scale = quant_scale(t.get(r * cols));
    for (int64_t c = 1; c < cols; ++c) {
      const uint64_t i = uint64_t(r * cols + c);
      const double k = std::floor(random_uniform(key + 1, i) * 254.0) - 127.0;
      float v = float((k + 0.5) * double(scale));
      for (int64_t ulps = int64_t(i % 7) - 3; ulps != 0; ulps += ulps > 0 ? -1 : 1)
        v = std::nextafter(v, ulps > 0 ? INFINITY : -INFINITY);
      if (i % 5 == 0) v = float(random_normal(key + 2, i) * amax / 4);
      t.set(r * cols + c, std::clamp(v, -float(amax), float(amax)));
    }
  }
  return t;
}

TEST_P(QuantizeAt, ValuesNearHalfStepsMatchTheReference) {
  const uint64_t key = testing::test_seed() + 3;
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t rows = 40, cols = 509;
    const Tensor x = near_half_steps(dt, rows, cols, key);
    for (bool transposed : {false, true}) rows_equal_the_reference(passes_, x, rows, cols, transposed);
  }
}

// Per token, then gathered: a dispatched buffer (each token's row copied to its assignments' rows in
// scattered order, a dropped assignment, a token with none) gives the values of quantizing every row,
// on both implementations; rows that are no token's are left alone.
TEST_P(QuantizeAt, TokenRowsEqualEveryRowQuantized) {
  const uint64_t key = testing::test_seed() + 2;
  const int64_t tokens = 9, topk = 3, cols = 70, rows = tokens * topk + 2;  // two rows nobody's
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = spread(dt, tokens, cols, key);
    std::vector<int32_t> assignment_row(size_t(tokens * topk));
    for (int64_t a = 0; a < tokens * topk; ++a)
      assignment_row[size_t(a)] = int32_t((a * 7 + 2) % (tokens * topk));
    assignment_row[4] = -1;  // token 1 lost one assignment
    for (int64_t k = 0; k < topk; ++k) assignment_row[size_t(5 * topk + k)] = -1;  // token 5 lost all
    Tensor rows_x(dt, {rows, cols});
    rows_x.fill_zero();
    for (int64_t a = 0; a < tokens * topk; ++a)
      if (assignment_row[size_t(a)] >= 0)
        for (int64_t c = 0; c < cols; ++c)
          rows_x.set(assignment_row[size_t(a)] * cols + c, x.get((a / topk) * cols + c));
    std::vector<int8_t> every(static_cast<size_t>(rows * cols)), q(every.size(), 99), qr(every.size(), 99);
    std::vector<float> every_s(static_cast<size_t>(rows)), s(every_s.size(), -1.0f),
        sr(every_s.size(), -1.0f);
    ref_quant::quantize_rows(every.data(), every_s.data(), rows_x.raw(), dt, rows, cols, cols);
    passes_.token_rows(q.data(), s.data(), rows_x.raw(), dt, tokens, topk, cols, assignment_row.data());
    ref_quant::quantize_token_rows(qr.data(), sr.data(), rows_x.raw(), dt, tokens, topk, cols,
                                   assignment_row.data());
    expect_bytes_equal(q, qr, "token rows");
    expect_scales_equal(s, sr, "token rows");
    std::vector<bool> written(size_t(rows), false);
    for (int32_t r : assignment_row)
      if (r >= 0) written[size_t(r)] = true;
    for (int64_t r = 0; r < rows; ++r) {
      if (!written[size_t(r)]) {
        EXPECT_EQ(s[size_t(r)], -1.0f) << "row " << r << " is no token's: left alone";
        continue;
      }
      EXPECT_EQ(s[size_t(r)], every_s[size_t(r)]) << "row " << r;
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(q[size_t(r * cols + c)], every[size_t(r * cols + c)]) << r;
    }
  }
}

TEST_P(QuantizeAt, ExpertsAndColumnsMatchTheReference) {
  const uint64_t key = testing::test_seed() + 1;
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (int parts : {1, 2})
      for (bool transposed : {false, true}) {
        const int64_t E = 3, Kd = 37, part_cols = 45, N = part_cols * parts;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " parts " + std::to_string(parts) +
                     (transposed ? " transposed" : ""));
        std::vector<Tensor> w;
        for (int p = 0; p < parts; ++p) w.push_back(spread(dt, E * Kd, part_cols, key + uint64_t(p)));
        for (int64_t i = 0; i < Kd * part_cols; ++i)
          for (Tensor& t : w) t.set(Kd * part_cols + i, 0.0f);  // expert 1 all zeros
        const ExpertWeights view =
            parts == 1 ? ExpertWeights(w[0].raw()) : ExpertWeights(w[0].raw(), w[1].raw());
        std::vector<int8_t> q(static_cast<size_t>(E * Kd * N)), qr(q.size());
        std::vector<float> s(static_cast<size_t>(E)), sr(s.size());
        passes_.experts(q.data(), s.data(), view, dt, E, Kd, N, transposed);
        ref_quant::quantize_experts(qr.data(), sr.data(), view, dt, E, Kd, N, transposed);
        expect_bytes_equal(q, qr, "experts");
        expect_scales_equal(s, sr, "experts");
        EXPECT_EQ(sr[1], FLT_MIN);
      }
  for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
    const int64_t Kd = 70, N = 33;
    Tensor w = spread(dt, Kd, N, key + 5);
    for (int64_t k = 0; k < Kd; ++k) w.set(k * N + 4, 0.0f);  // a zero column
    std::vector<int8_t> q(static_cast<size_t>(Kd * N)), qr(q.size());
    std::vector<float> s(static_cast<size_t>(N)), sr(s.size());
    passes_.columns(q.data(), s.data(), w.raw(), dt, Kd, N);
    ref_quant::quantize_columns(qr.data(), sr.data(), w.raw(), dt, Kd, N);
    expect_bytes_equal(q, qr, "columns");
    expect_scales_equal(s, sr, "columns");
    expect_round_trip(w, qr, sr, Kd, N, false);
    EXPECT_EQ(sr[4], FLT_MIN);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantizeAt, ::testing::ValuesIn(kQuantizeLevels),
                         testing::isa_instance_name<cpu::QuantizePasses>);

// The entry points run the best level this CPU reaches.
TEST(Quantize, EntryPointsRunTheBestLevelHere) {
  const IsaLevel level = isa_level();
  const auto expected = level >= IsaLevel::avx512_bf16 ? &cpu::avx512_bf16_quantize_passes
                        : level >= IsaLevel::avx2      ? &cpu::avx2_quantize_passes
                                                       : &cpu::baseline_quantize_passes;
  EXPECT_EQ(cpu::quantize_passes().rows, expected().rows) << isa_level_name(level);
  EXPECT_EQ(cpu::quantize_passes().token_rows, expected().token_rows);
}

TEST(Quantize, TheSeedsRules) {
  // scale = amax / 127 + tiny; halves round to even; the largest magnitude is +-127.
  const float x[] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -127.0f, 63.5f};
  std::vector<int8_t> q(7);
  float scale;
  ref_quant::quantize_rows(q.data(), &scale, x, Dtype::f32, 1, 7, 7);
  EXPECT_EQ(scale, 1.0f + FLT_MIN);  // == 1.0f: FLT_MIN vanishes next to 1
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{127, 0, 2, 2, 0, -127, 64}));
}

// The int8 transpose the backward takes its transposed weights by equals the plain loop, at whole and
// partial 16 x 16 tiles and 64 x 64 blocks, per expert.
TEST(TransposeS8, EqualsThePlainLoop) {
  const uint64_t key = testing::test_seed() + 4;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1},
                            {16, 16},
                            {17, 33},
                            {64, 64},
                            {100, 3},
                            {3, 100},
                            {130, 70},
                            {0, 5}})
    for (int64_t experts : {1, 3}) {
      SCOPED_TRACE(std::to_string(experts) + " x " + std::to_string(rows) + "x" + std::to_string(cols));
      std::vector<int8_t> src(size_t(experts * rows * cols)), dst(src.size(), 0), expected(src.size());
      for (size_t i = 0; i < src.size(); ++i) src[i] = int8_t(int(random_uniform(key, i) * 255.0) - 127);
      for (int64_t e = 0; e < experts; ++e)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            expected[size_t((e * cols + c) * rows + r)] = src[size_t((e * rows + r) * cols + c)];
      cpu::transpose_s8(dst.data(), src.data(), experts, rows, cols);
      expect_bytes_equal(dst, expected, "transpose");
    }
}

// ---- nn_s8 ----------------------------------------------------------------------------------------

class EveryInt8Variant : public ::testing::TestWithParam<std::string> {};

// `table`: the kernel table as --gemm-variant GetParam() makes it (no tuning file: nothing measured).
#define MOE_INT8_TABLE_OR_SKIP(table)                                             \
  if (const GemmVariant* v = gemm_variant(GetParam()); !v->unavailable().empty()) \
    GTEST_SKIP() << GetParam() << ": " << v->unavailable();                       \
  KernelConfig table##_config;                                                    \
  table##_config.gemm_variant = GetParam();                                       \
  table##_config.tuning_file = "none";                                            \
  GemmKernels table(table##_config, nullptr)

std::vector<std::string> int8_variant_names() {
  std::vector<std::string> names;
  for (const GemmVariant& v : gemm_variants())
    if (!std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn_s8)])) names.push_back(v.name);
  return names;
}

TEST_P(EveryInt8Variant, NnS8EqualsTheIntegerReferenceBitForBit) {
  MOE_INT8_TABLE_OR_SKIP(table);
  check_nn_s8(
      testing::test_seed(), [&](auto&&... args) { table.nn_s8(args...); },
      [&](const S8Call& k) {
        GemmCall call;
        call.form = GemmForm::nn_s8;
        call.in_dtype = call.b_dtype = Dtype::s8;
        call.out_dtype = k.out_dtype;
        call.accumulate = k.accumulate;
        call.experts = k.experts;
        call.Kd = k.c->Kd;
        call.N = k.c->N;
        const std::string ran = GetParam() == "ref" ? "ref" : table.row_for(call).variant->name;
        EXPECT_EQ(table.take_choices(), "nn_s8:" + ran);
      });
}

TEST_P(EveryInt8Variant, NnS8ExtremeValuesSumExactly) {
  MOE_INT8_TABLE_OR_SKIP(table);
  check_nn_s8_extremes([&](auto&&... args) { table.nn_s8(args...); });
}

TEST_P(EveryInt8Variant, NnS8SwigluMatchesTheReference) {
  MOE_INT8_TABLE_OR_SKIP(table);
  GemmCall probe;
  probe.form = GemmForm::nn_s8_swiglu;
  probe.in_dtype = probe.b_dtype = Dtype::s8;
  probe.out_dtype = Dtype::bf16;
  if (const std::string why = gemm_variant(GetParam())->supports(probe, kDefaults); !why.empty())
    GTEST_SKIP() << GetParam() << ": " << why;
  check_nn_s8_swiglu(testing::test_seed(), [&](auto&&... args) { table.nn_s8_swiglu(args...); });
  EXPECT_EQ(table.take_choices(), "nn_s8_swiglu:" + GetParam());
}

#ifdef MOE_HAVE_ONEDNN
// oneDNN's nn_s8 row runs only where its int8 sums are exact (VNNI, AMX: supports()). Its plumbing
// (groups, padding rows, the epilogue, accumulate) runs on every CPU with an s8 matmul: called directly
// with lhs in [-127, 0], which its AVX2 kernel's shift to u8 (+128) keeps at most 128, so no vpmaddubsw
// pair saturates (2 * 128 * 127 < 32767) and the sums are exact there too.
TEST(OnednnInt8, PlumbingEqualsTheReferenceWhereNothingSaturates) {
  GemmCall probe;
  probe.form = GemmForm::nn_s8;
  probe.in_dtype = probe.b_dtype = Dtype::s8;
  if (onednn::supports(probe, kDefaults).starts_with("oneDNN makes no"))
    GTEST_SKIP() << onednn::supports(probe, kDefaults);
  uint64_t key = testing::test_seed() + 7;
  std::vector<S8Case> cases = kS8Cases;
  cases.push_back({"weights_reordered", {800, 3}, 40, 24});  // from 512 rows oneDNN packs the weights first
  for (const S8Case& c : cases)
    for (bool accumulate : {false, true}) {
      if (c.Kd > 4096) continue;  // the deep case's sums need no second look here
      SCOPED_TRACE(std::string(c.name) + (accumulate ? " accumulate" : ""));
      std::vector<int64_t> offset{0}, live;
      for (int64_t s : c.sizes) {
        offset.push_back(offset.back() + s);
        live.push_back(s - s / 3);
      }
      const int64_t E = int64_t(c.sizes.size()), rows = offset.back();
      std::vector<int8_t> lhs = random_s8(rows * c.Kd, ++key);
      for (int8_t& v : lhs) v = int8_t(-std::abs(int(v)));
      const std::vector<int8_t> rhs = random_s8(E * c.Kd * c.N, ++key);
      const std::vector<float> ls = random_scales(rows, ++key), rs = random_scales(E * c.N, ++key);
      for (Dtype out_dt : {Dtype::f32, Dtype::bf16}) {
        if (accumulate && out_dt != Dtype::f32) continue;
        const GroupedShape groups{offset.data(), E, live.data()};
        const Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data(), true};
        Tensor got(out_dt, {rows, c.N}), want(out_dt, {rows, c.N});
        for (int64_t i = 0; i < got.numel(); ++i) {
          got.set(i, float(i % 5));
          want.set(i, float(i % 5));
        }
        onednn::grouped_gemm_nn_s8(kDefaults, got.raw(), out_dt, in, groups, c.Kd, c.N, accumulate);
        ref_gemm::grouped_gemm_nn_s8(kDefaults, want.raw(), out_dt, in, groups, c.Kd, c.N, accumulate);
        ASSERT_EQ(std::memcmp(got.raw(), want.raw(), size_t(got.numel()) * dtype_size(out_dt)), 0)
            << dtype_name(out_dt);
      }
    }
}

// Where supports() calls oneDNN's int8 sums inexact, they are: 127 * 127 pairs saturate its AVX2 kernel.
// Where they are exact it takes the call (and EveryInt8Variant checks it).
TEST(OnednnInt8, RefusesExactlyWhereItsSumsSaturate) {
  GemmCall probe;
  probe.form = GemmForm::nn_s8;
  probe.in_dtype = probe.b_dtype = Dtype::s8;
  const std::string why = onednn::supports(probe, kDefaults);
  if (why.starts_with("oneDNN makes no")) GTEST_SKIP() << why;
  const int64_t rows = 2, Kd = 64, N = 8;
  const std::vector<int8_t> lhs(size_t(rows * Kd), 127), rhs(size_t(Kd * N), 127);
  const std::vector<float> ls(size_t(rows), 1.0f), rs(1, 1.0f);
  const int64_t offset[] = {0, rows};
  std::vector<float> got(size_t(rows * N));
  onednn::grouped_gemm_nn_s8(kDefaults, got.data(), Dtype::f32,
                             {lhs.data(), ls.data(), rhs.data(), rs.data()}, {offset, 1}, Kd, N, false);
  const bool exact = std::all_of(got.begin(), got.end(), [&](float v) { return v == float(Kd * 127 * 127); });
  EXPECT_EQ(exact, why.empty()) << "supports(): '" << why << "', got " << got[0] << " for " << Kd * 127 * 127;
}
#endif
// ---- our int8 kernel's instances (cpu/gemm/gemm_s8.h)
// ----------------------------------------------------------- Each instance on its own: the hardware ones
// (AVX-512 VNNI, AVX-VNNI, AVX2) where this CPU runs them, SKIPPED with the reason elsewhere, and their plain
// C++ emulation (vpdpbusd in uint32 arithmetic; AVX2's saturating pair sums) on every CPU in each geometry,
// so that the packing, the corrections, the tiles and the epilogues are checked everywhere.
std::string s8_unavailable(const s8::Instance& inst) {
  if (&inst == &cpu::isa_avx2::s8::kInstance) return gemm_variant("avx2_s8")->unavailable();
  return vnni::unavailable(inst);  // "" for the emulated ones
}

class S8Instance : public ::testing::TestWithParam<const s8::Instance*> {
 protected:
  void SetUp() override {
    if (const std::string why = s8_unavailable(*GetParam()); !why.empty())
      GTEST_SKIP() << GetParam()->name << ": " << why;
  }
  void nn_s8(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd, int64_t N,
             bool accumulate = false) {
    s8::nn_s8_with(*GetParam(), out, out_dtype, in, groups, Kd, N, accumulate);
  }
};

TEST_P(S8Instance, NnS8EqualsTheIntegerReferenceBitForBit) {
  check_nn_s8(testing::test_seed(), [&](auto&&... args) { nn_s8(args...); });
}

TEST_P(S8Instance, NnS8ExtremeValuesSumExactly) {
  check_nn_s8_extremes([&](auto&&... args) { nn_s8(args...); });
}

TEST_P(S8Instance, NnS8SwigluMatchesTheReference) {
  check_nn_s8_swiglu(testing::test_seed(),
                     [&](auto&&... args) { s8::nn_s8_swiglu_with(*GetParam(), args...); });
}

// The correction of each row (-128 x its sum) at the extremes of the u8 shift: every lhs -127 against every
// weight -127 (u8 1) and +127 (u8 255), over a reduction of every residue mod 4, unpadded and padded.
TEST_P(S8Instance, WeightsAtBothEndsSumExactly) {
  for (int64_t Kd : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(4097)})
    for (int8_t b : {int8_t(-127), int8_t(127)}) {
      SCOPED_TRACE("Kd " + std::to_string(Kd) + " b " + std::to_string(int(b)));
      const int64_t rows = 13, N = 35;
      const std::vector<int8_t> lhs(size_t(rows * Kd), -127), rhs(size_t(Kd * N), b);
      const std::vector<float> ls(size_t(rows), 1.0f), rs(1, 1.0f);
      const int64_t offset[] = {0, rows};
      std::vector<float> got(size_t(rows * N));
      nn_s8(got.data(), Dtype::f32, {lhs.data(), ls.data(), rhs.data(), rs.data()}, {offset, 1}, Kd, N);
      for (float v : got) ASSERT_EQ(double(v), double(float(double(Kd) * -127 * b)));
    }
}

// The same bits on 1, 2, 3 and 7 threads (items are taken in turn: any thread may run any tile).
TEST_P(S8Instance, SameBitsOnOneTwoThreeAndSevenThreads) {
  uint64_t key = testing::test_seed() + 11;
  const std::vector<int64_t> sizes{70, 0, 5, 131, 49};
  const int64_t Kd = 203, N = 97, E = int64_t(sizes.size());
  std::vector<int64_t> offset{0};
  for (int64_t n : sizes) offset.push_back(offset.back() + n);
  const int64_t rows = offset.back();
  const std::vector<int8_t> lhs = random_s8(rows * Kd, ++key), rhs = random_s8(E * Kd * N, ++key);
  const std::vector<float> ls = random_scales(rows, ++key), rs = random_scales(E * N, ++key);
  const Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data(), true};
  Tensor want(Dtype::bf16, {rows, N});
  ref_gemm::grouped_gemm_nn_s8(kDefaults, want.raw(), Dtype::bf16, in, {offset.data(), E}, Kd, N, false);
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    Tensor got(Dtype::bf16, {rows, N});
    nn_s8(got.raw(), Dtype::bf16, in, {offset.data(), E}, Kd, N);
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), size_t(rows * N) * 2), 0) << threads << " threads";
  }
  omp_set_num_threads(threads_before);
}

// Weights packed once (WeightPacks: int8_routed_prequant's) give the bits of weights packed per call, in
// a second call with other rows and routing too (every expert was packed, not only the first call's), for
// both forms' layouts in one WeightPacks.
// Packed per call (phase by phase: at the large shape each expert's packing is ~2 MB, so several phases
// take the two slots in turn) and packed once into a pack cache (one phase) give the same bits, and nn_s8's
// are the reference's.
TEST_P(S8Instance, WeightsPackedOnceEqualPackedPerCall) {
  uint64_t key = testing::test_seed() + 12;
  struct Shape {
    int64_t Kd, N;
    std::vector<std::vector<int64_t>> offsets;  // E + 1 each
  };
  const Shape shapes[] = {{66, 46, {{0, 0, 30, 30, 41}, {0, 17, 17, 60, 61}}},
                          {1030, 2052, {{0, 3, 3, 8, 9, 11, 15, 16}}}};  // an odd quad, ragged tiles
  for (const Shape& shape : shapes) {
    const int64_t E = int64_t(shape.offsets[0].size()) - 1, Kd = shape.Kd, N = shape.N, M = N / 2;
    const std::vector<int8_t> rhs = random_s8(E * Kd * N, ++key);
    const std::vector<float> rs = random_scales(E, ++key);
    WeightPacks packs;
    for (const std::vector<int64_t>& offset : shape.offsets) {
      const int64_t rows = offset.back();
      SCOPED_TRACE("Kd " + std::to_string(Kd) + ", rows " + std::to_string(rows));
      const std::vector<int8_t> lhs = random_s8(rows * Kd, ++key);
      const std::vector<float> ls = random_scales(rows, ++key);
      Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data()};
      const GroupedShape groups{offset.data(), E};
      Tensor want(Dtype::f32, {rows, N}), got(Dtype::f32, {rows, N}), reference(Dtype::f32, {rows, N});
      Tensor want_g(Dtype::f32, {rows, M}), got_g(Dtype::f32, {rows, M});
      std::vector<int8_t> q(size_t(rows * M)), want_q(q.size());
      std::vector<float> scale(static_cast<size_t>(rows)), want_scale(scale.size());
      s8::nn_s8_with(*GetParam(), want.raw(), Dtype::f32, in, groups, Kd, N, false);
      ref_gemm::grouped_gemm_nn_s8(GemmThresholds{}, reference.raw(), Dtype::f32, in, groups, Kd, N, false);
      EXPECT_EQ(std::memcmp(reference.raw(), want.raw(), size_t(rows * N) * 4), 0) << "nn_s8 per call";
      s8::nn_s8_swiglu_with(*GetParam(), {want.raw(), want_g.raw(), want_q.data(), want_scale.data()},
                            Dtype::f32, in, {}, groups, Kd, M, nullptr);
      in.rhs_packs = &packs;
      s8::nn_s8_with(*GetParam(), got.raw(), Dtype::f32, in, groups, Kd, N, false);
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), size_t(rows * N) * 4), 0) << "nn_s8";
      s8::nn_s8_swiglu_with(*GetParam(), {got.raw(), got_g.raw(), q.data(), scale.data()}, Dtype::f32, in, {},
                            groups, Kd, M, nullptr);
      EXPECT_EQ(std::memcmp(got_g.raw(), want_g.raw(), size_t(rows * M) * 4), 0) << "nn_s8_swiglu";
      EXPECT_EQ(q, want_q);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(S8, S8Instance,
                         ::testing::Values(&cpu::isa_avx512::vnni::kInstance, &cpu::isa_avx2::vnni::kInstance,
                                           &cpu::isa_avx2::s8::kInstance, &s8_emulated::kZmm,
                                           &s8_emulated::kYmm, &s8_emulated::kAvx2),
                         [](const auto& info) { return std::string(info.param->name); });

// The variant runs the best instance this CPU has, and says why not where it has none.
TEST(Vnni, TheVariantRunsTheBestInstanceHere) {
  const s8::Instance* inst = vnni::hardware_instance();
  const std::string why = gemm_variant("vnni")->unavailable();
  EXPECT_EQ(inst == nullptr, !why.empty()) << why;
  if (vnni::unavailable(cpu::isa_avx512::vnni::kInstance).empty()) {
    EXPECT_EQ(inst, &cpu::isa_avx512::vnni::kInstance);
  }
  if (!inst) {
    EXPECT_NE(why.find("VNNI"), std::string::npos) << why;
  }
}

// One WeightPacks holds one tensor's packings: another tensor with it is a caller's bug, caught.
TEST(WeightPacks, AnotherTensorWithTheSamePacksFailsTheInvariant) {
  WeightPacks packs;
  const std::vector<int8_t> a(64), b(64);
  EXPECT_EQ(packs.find("x", a.data(), 1, 8, 8), nullptr);
  EXPECT_NE(packs.make("x", a.data(), 1, 8, 8, 100), nullptr);
  EXPECT_NE(packs.find("x", a.data(), 1, 8, 8), nullptr);
  EXPECT_EQ(packs.find("y", a.data(), 1, 8, 8), nullptr);
  EXPECT_DEATH((void)packs.find("x", b.data(), 1, 8, 8), "one object per weight tensor");
  EXPECT_DEATH((void)packs.find("x", a.data(), 1, 8, 4), "one object per weight tensor");
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryInt8Variant, ::testing::ValuesIn(int8_variant_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe
