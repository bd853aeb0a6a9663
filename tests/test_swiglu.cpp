// SwiGLU's passes (cpu/ops/swiglu.h) at each ISA level this CPU reaches (cpu/ops/swiglu_isa.h: the build's
// baseline, AVX2, AVX-512 BF16; the others SKIPPED with the reason): forward, backward and the forward
// that quantizes its rows, against float64 SwiGLU on fresh random inputs (seed printed), gate and up in
// one fused buffer and in two, with and without routing weights, rows of odd widths and none. The
// quantized rows are bitwise the reference quantization of g as stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/ops/swiglu.h"
#include "cpu/ops/swiglu_isa.h"
#include "isa_instances.h"
#include "moe/cpu_isa.h"
#include "moe/quantize.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "ref/ref.h"
#include "test_util.h"

namespace moe {
namespace {

const auto kLevels = testing::isa_instances(&cpu::baseline_swiglu_passes, &cpu::avx2_swiglu_passes,
                                            &cpu::avx512_bf16_swiglu_passes);

// Bounds: float32 math (exp_approx ~2 ulp, a handful of rounded products) and, for bf16 storage, the
// output's rounding (half of 2^-7 relative).
double relative_bound(Dtype dt) {
  return dt == Dtype::bf16 ? 4.0e-3 : 2.0e-6;
}

struct Case {
  int64_t rows, M;
  bool fused, weighted;
  std::string name(Dtype dt) const {
    return std::string(dtype_name(dt)) + " rows " + std::to_string(rows) + " M " + std::to_string(M) +
           (fused ? " fused" : " split") + (weighted ? " weighted" : "");
  }
};

const Case kCases[] = {{0, 7, true, false},   {1, 1, true, true},       {5, 17, false, true},
                       {33, 130, true, true}, {64, 1024, false, false}, {3, 1000, true, false}};

class SwigluPassesAt : public testing::IsaInstanceTest<cpu::SwigluPasses> {
 protected:
  // h: gate and up of every row (fused: (rows, 2M), a = h, b = h + M; else a (rows, M) then b), values
  // to +-4 sigma with some far out where exp's clamp decides.
  struct Inputs {
    Tensor h, dg;
    std::vector<float> weight;
    cpu::GateUp gu;
  };
  static Inputs inputs(const Case& c, Dtype dt, uint64_t key) {
    Inputs in;
    in.h = Tensor(dt, {std::max<int64_t>(c.rows, 1), 2 * c.M});
    in.dg = Tensor(dt, {std::max<int64_t>(c.rows, 1), c.M});
    for (int64_t i = 0; i < in.h.numel(); ++i) {
      double v = 2.0 * random_normal(key, uint64_t(i));
      if (i % 29 == 3) v = (i % 2 ? 95.0 : -95.0);
      in.h.set(i, float(v));
    }
    for (int64_t i = 0; i < in.dg.numel(); ++i) in.dg.set(i, float(random_normal(key + 1, uint64_t(i))));
    for (int64_t r = 0; r < c.rows; ++r) in.weight.push_back(float(0.25 + 0.5 * ((r * 7) % 5) / 4.0));
    const size_t es = dtype_size(dt);
    const char* base = static_cast<const char*>(in.h.raw());
    in.gu = c.fused ? cpu::GateUp{base, base + size_t(c.M) * es, 2 * c.M}
                    : cpu::GateUp{base, base + size_t(c.rows * c.M) * es, c.M};
    return in;
  }
  // fn(case, dtype, inputs, row weights or nullptr) for every case and dtype, on fresh inputs.
  template <typename Fn>
  void for_each_case(Fn fn) {
    const uint64_t key = testing::test_seed();
    for (Dtype dt : {Dtype::f32, Dtype::bf16})
      for (const Case& c : kCases) {
        SCOPED_TRACE(c.name(dt));
        const Inputs in = inputs(c, dt, key);
        fn(c, dt, in, c.weighted ? in.weight.data() : nullptr);
      }
  }
  static double value(const void* base, Dtype dt, int64_t i) {
    return dt == Dtype::f32 ? static_cast<const float*>(base)[i]
                            : bf16_to_f32(static_cast<const bf16_t*>(base)[i]);
  }
};

TEST_P(SwigluPassesAt, ForwardAndItsQuantizedRowsMatchTheReference) {
  for_each_case([&](const Case& c, Dtype dt, const Inputs& in, const float* w) {
    Tensor g(dt, {std::max<int64_t>(c.rows, 1), c.M}), g2(dt, {std::max<int64_t>(c.rows, 1), c.M});
    passes_.forward(g.raw(), dt, in.gu, dt, c.rows, c.M, w);
    std::vector<int8_t> q(size_t(c.rows * c.M)), qr(q.size());
    std::vector<float> s(size_t(c.rows)), sr(s.size());
    passes_.forward_quantized(g2.raw(), dt, q.data(), s.data(), in.gu, dt, c.rows, c.M, w);
    const double bound = relative_bound(dt);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t m = 0; m < c.M; ++m) {
        const double a = value(in.gu.a, dt, r * in.gu.ld + m), b = value(in.gu.b, dt, r * in.gu.ld + m);
        const double want = ref::silu(a) * b * (w ? w[r] : 1.0);
        const double got = g.get(r * c.M + m);
        ASSERT_LE(std::fabs(got - want), bound * std::fabs(want) + 1e-30) << r << "," << m << " a=" << a;
      }
    ASSERT_EQ(std::memcmp(g.raw(), g2.raw(), size_t(c.rows * c.M) * dtype_size(dt)), 0)
        << "the quantizing forward's g differs from the forward's";
    ref_quant::quantize_rows(qr.data(), sr.data(), g.raw(), dt, c.rows, c.M, c.M);
    EXPECT_EQ(std::memcmp(q.data(), qr.data(), q.size()), 0) << "quantized rows differ from the reference's";
    EXPECT_EQ(std::memcmp(s.data(), sr.data(), s.size() * 4), 0) << "row scales differ from the reference's";
  });
}

// forward_at over every third row (and the last): those rows are the forward's bit for bit, the others
// left as they were.
TEST_P(SwigluPassesAt, ForwardAtChosenRowsLeavesTheOthers) {
  for_each_case([&](const Case& c, Dtype dt, const Inputs& in, const float* w) {
    Tensor all(dt, {std::max<int64_t>(c.rows, 1), c.M}), some(dt, {std::max<int64_t>(c.rows, 1), c.M});
    for (int64_t i = 0; i < some.numel(); ++i) some.set(i, -7.0);
    passes_.forward(all.raw(), dt, in.gu, dt, c.rows, c.M, w);
    std::vector<int64_t> chosen;
    for (int64_t r = 0; r < c.rows; ++r)
      if (r % 3 == 1 || r == c.rows - 1) chosen.push_back(r);
    passes_.forward_at(some.raw(), dt, in.gu, dt, chosen.data(), int64_t(chosen.size()), c.M, w);
    for (int64_t r = 0; r < c.rows; ++r) {
      const bool is_chosen = std::find(chosen.begin(), chosen.end(), r) != chosen.end();
      for (int64_t m = 0; m < c.M; ++m)
        ASSERT_EQ(some.get(r * c.M + m), is_chosen ? all.get(r * c.M + m) : -7.0) << r << "," << m;
    }
  });
}

TEST_P(SwigluPassesAt, BackwardMatchesTheReference) {
  for_each_case([&](const Case& c, Dtype dt, const Inputs& in, const float* w) {
    Tensor dh(dt, {std::max<int64_t>(c.rows, 1), 2 * c.M});
    char* base = static_cast<char*>(dh.raw());
    const size_t es = dtype_size(dt);
    const cpu::GateUpGrad out = c.fused ? cpu::GateUpGrad{base, base + size_t(c.M) * es, 2 * c.M}
                                        : cpu::GateUpGrad{base, base + size_t(c.rows * c.M) * es, c.M};
    passes_.backward(out, dt, in.dg.raw(), in.gu, dt, c.rows, c.M, w);
    const double bound = relative_bound(dt);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t m = 0; m < c.M; ++m) {
        const int64_t i = r * in.gu.ld + m;
        const double a = value(in.gu.a, dt, i), b = value(in.gu.b, dt, i);
        const double dgw = value(in.dg.raw(), dt, r * c.M + m) * (w ? w[r] : 1.0);
        const double want_da = dgw * b * ref::silu_grad(a), want_db = dgw * ref::silu(a);
        // silu'(a) = s (1 + a (1 - s)) sums terms of both signs: bounded by their magnitudes.
        const double s = 1.0 / (1.0 + std::exp(-a));
        const double da_scale = std::fabs(dgw * b) * s * (1.0 + std::fabs(a) * (1.0 - s));
        ASSERT_LE(std::fabs(value(out.da, dt, i) - want_da), bound * da_scale + 1e-30) << r << "," << m;
        ASSERT_LE(std::fabs(value(out.db, dt, i) - want_db), bound * std::fabs(want_db) + 1e-30)
            << r << "," << m;
      }
  });
}

// The entry points run the best level this CPU reaches.
TEST(SwigluPasses, EntryPointsRunTheBestLevelHere) {
  const IsaLevel level = isa_level();
  const auto expected = level >= IsaLevel::avx512_bf16 ? &cpu::avx512_bf16_swiglu_passes
                        : level >= IsaLevel::avx2      ? &cpu::avx2_swiglu_passes
                                                       : &cpu::baseline_swiglu_passes;
  EXPECT_EQ(cpu::swiglu_passes().forward, expected().forward) << isa_level_name(level);
  EXPECT_EQ(cpu::swiglu_passes().forward_quantized, expected().forward_quantized);
  EXPECT_EQ(cpu::swiglu_passes().backward, expected().backward);
  EXPECT_EQ(cpu::swiglu_passes().forward_at, expected().forward_at);
}

INSTANTIATE_TEST_SUITE_P(Isa, SwigluPassesAt, ::testing::ValuesIn(kLevels),
                         testing::isa_instance_name<cpu::SwigluPasses>);

}  // namespace
}  // namespace moe
