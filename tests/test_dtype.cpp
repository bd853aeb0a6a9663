// float16 conversions (moe/dtype.h's scalar ones and vec_math.h's row ones, F16C where the build has it)
// against a plain reference written from IEEE 754's definition of binary16: every bit pattern widened,
// and float32 values narrowed at the ties, the overflow edge, the subnormals and at random.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/ops/vec_math.h"
#include "moe/dtype.h"
#include "moe/tensor.h"
#include "test_util.h"

namespace moe {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The value of a float16 bit pattern from its fields (NaN patterns give NaN).
double reference_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else
    v = std::ldexp(double(1024 + mant), exp - 25);
  return sign ? -v : v;
}

// The nearest float16 to f by IEEE's rule: the closer of the two neighbours, the one with an even
// mantissa on a tie, and inf from 65520 on (the tie between 65504 and 2^16, which would have an even
// mantissa). The finite non-negative values in order are the bit patterns 0 .. 0x7bff.
uint16_t reference_round(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0;  // the largest pattern whose value is <= a
  for (int step = 1 << 14; step > 0; step >>= 1)
    if (lo + step <= 0x7bff && reference_value(uint16_t(lo + step)) <= a) lo = uint16_t(lo + step);
  if (reference_value(lo) == a || lo == 0x7bff) return sign | lo;
  const double below = a - reference_value(lo), above = reference_value(uint16_t(lo + 1)) - a;
  if (below < above || (below == above && lo % 2 == 0)) return sign | lo;
  return sign | uint16_t(lo + 1);
}

TEST(Float16, EveryBitPatternWidensExactlyAndRoundTrips) {
  int64_t bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const f16_t v{uint16_t(h)};
    const float f = f16_to_f32(v);
    const double want = reference_value(uint16_t(h));
    if (std::isnan(want)) {
      // NaN stays NaN, its sign kept, quiet (as vcvtph2ps), and narrows back to the quiet pattern.
      bad += !std::isnan(f) || std::signbit(f) != bool(h & 0x8000) || !(bits_of(f) & 0x400000) ||
             f32_to_f16(f).bits != (h | 0x200);
      continue;
    }
    // Exact, the sign of zero included; narrowing gives the same bits back.
    bad += double(f) != want || std::signbit(f) != bool(h & 0x8000) || f32_to_f16(f).bits != h;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Float16, NarrowingRoundsToNearestEven) {
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              1.0f,
                              -2.5f,
                              65504.0f,
                              65519.99f,
                              65520.0f,
                              -65520.0f,
                              7e4f,
                              1e10f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              0x1p-24f,
                              0x1p-25f,
                              0x1.8p-25f,
                              0x1.8p-24f,
                              0x1p-14f,
                              0x1.ff8p-15f,
                              0x1.ffcp-15f,
                              0x1p-26f,
                              -0x1p-25f};
  // Every midpoint between neighbouring float16 values (the ties), and the floats just either side.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float mid = float((reference_value(h) + reference_value(uint16_t(h + 1))) / 2);
    cases.insert(cases.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e6f), -mid});
  }
  std::mt19937_64 gen(testing::test_seed());
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 17);
  for (int i = 0; i < 200000; ++i)
    cases.push_back(std::ldexp(mantissa(gen), exponent(gen)) * (i % 2 ? -1 : 1));

  int64_t bad = 0;
  for (float f : cases) {
    const uint16_t want = reference_round(f);
    bad += f32_to_f16(f).bits != want;
    if (f32_to_f16(f).bits != want && bad < 10)
      ADD_FAILURE() << "f32_to_f16(" << f << ") = " << f32_to_f16(f).bits << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f32_to_f16(65519.99f).bits, 0x7bff);   // 65504
  EXPECT_EQ(f32_to_f16(65520.0f).bits, 0x7c00);    // the tie goes to the even side: inf
  EXPECT_EQ(f32_to_f16(0x1p-25f).bits, 0x0000);    // the tie between 0 and 2^-24 goes to 0
  EXPECT_EQ(f32_to_f16(0x1.8p-24f).bits, 0x0002);  // 1.5 units: the tie goes to 2
  EXPECT_EQ(f32_to_f16(std::nanf("")).bits & 0x7e00, 0x7e00);
}

// The row conversions the CPU kernels use (F16C's vcvtph2ps / vcvtps2ph where the build has them, the
// scalar ones at the tails) give the scalar functions' bits.
TEST(Float16, RowConversionsMatchTheScalarOnes) {
  std::vector<f16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = {uint16_t(h)};
  std::vector<float> wide(all.size());
  cpu::f16_to_f32_row(wide.data(), all.data(), int64_t(all.size()) - 3);  // a tail too
  int64_t bad = 0;
  for (size_t i = 0; i + 3 < all.size(); ++i) bad += bits_of(wide[i]) != bits_of(f16_to_f32(all[i]));
  EXPECT_EQ(bad, 0);

  std::mt19937_64 gen(testing::test_seed());
  std::uniform_int_distribution<uint32_t> any_bits;
  std::vector<float> src(100003);
  for (size_t i = 0; i < src.size(); ++i) {
    const uint32_t b = i < 0x10000 ? bits_of(f16_to_f32(all[i])) + uint32_t(i % 3) - 1 : any_bits(gen);
    std::memcpy(&src[i], &b, 4);
  }
  std::vector<f16_t> narrow(src.size());
  cpu::f32_to_f16_row(narrow.data(), src.data(), int64_t(src.size()));
  bad = 0;
  for (size_t i = 0; i < src.size(); ++i) bad += narrow[i].bits != f32_to_f16(src[i]).bits;
  EXPECT_EQ(bad, 0);
}

// bfloat16's row narrowing (AVX-512 BF16's vcvtneps2bf16, AVX2's integer rounding, the scalar one at the
// tails) gives moe::f32_to_bf16's bits: ties either way, the largest floats (rounding to inf), infinities,
// NaNs of each sign, quiet and signalling, and random normal floats; every length mod 16. Subnormal floats
// are left out: vcvtneps2bf16 flushes them to zero, which no bf16 the kernels store depends on.
TEST(Bfloat16, RowNarrowingMatchesTheScalarOne) {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0xbf808000u,
                                    0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                                    0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                                    0xff812345u, 0x7fffffffu, 0x00800000u};
  std::mt19937_64 gen(testing::test_seed());
  std::uniform_int_distribution<uint32_t> any_bits;
  while (patterns.size() < 4099) {
    const uint32_t b = any_bits(gen);
    if ((b & 0x7f800000u) != 0) patterns.push_back(b);  // no subnormals
  }
  std::vector<float> src(patterns.size());
  std::memcpy(src.data(), patterns.data(), src.size() * 4);
  for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(src.size())}) {
    std::vector<bf16_t> narrow(static_cast<size_t>(n));
    cpu::f32_to_bf16_row(narrow.data(), src.data(), n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += narrow[size_t(i)] != f32_to_bf16(src[size_t(i)]);
    EXPECT_EQ(bad, 0) << n << " values";
  }
}

#if defined(MOE_VEC_AVX2)
// The AVX2 rounding's parts a kernel may use apart (the gemv ymm tn's tile): bf16_of_16<true> (no NaN blend)
// gives moe::f32_to_bf16's bits for every float that is not a NaN, and any_nan finds a NaN of any payload
// in any lane of any of the vectors (the payloads whose carry would reach the exponent or the sign too).
TEST(Bfloat16, AnyNanGuardsTheRoundingWithoutItsNanBlend) {
  const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u, 0x7fffffffu, 0x7f80ffffu};
  std::mt19937_64 gen(testing::test_seed());
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int round = 0; round < 256; ++round) {
    uint32_t bits[16];
    for (uint32_t& b : bits) {
      do b = any_bits(gen);
      while ((b & 0x7f800000u) == 0 || ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0));
    }
    if (round % 2 == 1) bits[round % 16] = round % 4 == 1 ? 0x7f800000u : 0xff800000u;  // infinities
    float values[16];
    std::memcpy(values, bits, sizeof values);
    __m256 v[2] = {_mm256_loadu_ps(values), _mm256_loadu_ps(values + 8)};
    ASSERT_FALSE(cpu::any_nan<1>(v)) << "round " << round;
    alignas(32) bf16_t narrow[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(narrow), cpu::bf16_of_16<true>(v[0], v[1]));
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(narrow[i], f32_to_bf16(values[i])) << "round " << round << ", " << i;
    const uint32_t nan = nans[size_t(round) % std::size(nans)];
    float nan_value;
    std::memcpy(&nan_value, &nan, 4);
    values[round % 16] = nan_value;
    v[0] = _mm256_loadu_ps(values);
    v[1] = _mm256_loadu_ps(values + 8);
    EXPECT_TRUE(cpu::any_nan<1>(v)) << "a NaN " << std::hex << nan << " in lane " << std::dec << round % 16;
  }
}
#endif

TEST(Float16, IsARunDtypeNamedAsTheSeedNamesIt) {
  EXPECT_EQ(parse_run_dtype("float16"), Dtype::f16);
  EXPECT_STREQ(dtype_name(Dtype::f16), "float16");
  EXPECT_EQ(dtype_size(Dtype::f16), 2u);
  EXPECT_TRUE(is_run_dtype(Dtype::f16));
  EXPECT_TRUE(is_float(Dtype::f16));
  EXPECT_EQ(round_to_dtype(1.0 + 0x1p-12, Dtype::f16), 1.0);
  EXPECT_EQ(round_to_dtype(1e5, Dtype::f16), std::numeric_limits<double>::infinity());

  Tensor t(Dtype::f16, {4});
  t.set(0, 1.0 / 3.0);
  t.set(1, -70000.0);
  t.set(2, 1e-8);
  t.set(3, 0x1p-20);
  EXPECT_EQ(t.get(0), double(0x1.554p-2f));
  EXPECT_EQ(t.get(1), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(t.get(2), 0.0);
  EXPECT_EQ(t.get(3), 0x1p-20);  // a subnormal, exact
  const Tensor wide = t.to(Dtype::f32);
  EXPECT_EQ(wide.get(0), t.get(0));
}

}  // namespace
}  // namespace moe
