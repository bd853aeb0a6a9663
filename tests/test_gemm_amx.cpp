// The amx variant's kernels (src/cpu/gemm/amx/gemm_amx_kernel.h: nn, nn_swiglu, nt, tn; gemm_amx_s8_kernel.h:
// nn_s8) on emulated tiles
// (src/cpu/gemm/portable/amx_tiles_emulated.h): the same work list, weight packing, row staging and epilogues
// the hardware instance runs, checked on any CPU against the plain reference over gemm_cases.h's cases (odd
// sizes that are no multiple of a tile's 16 rows, 16 columns or 32 reduction elements, empty experts, padding
// rows, two weight parts), bf16 inputs to float32 and bf16 outputs. Fresh random inputs; the seed is printed
// (MOE_TEST_SEED replays). The hardware instance runs the EveryGemmVariant suites (test_gemm.cpp), SKIPPED
// off AMX.
//
// Tolerance (test_gemm.cpp's): the emulated TDPBF16PS multiplies bf16 pairs exactly in float32 and sums
// in float32, as the hardware does, so per element |got - want| <= 1e-5 S with S = sum_k |a_ik b_kj|
// (float32 accumulation over up to 1056 terms: ~sqrt(k) 6e-8 S in practice), plus 4e-3 |want| for a
// bf16 output's one rounding (half an ulp is 2^-9).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "gemm_cases.h"
#include "int8_gemm_cases.h"
#include "test_util.h"

namespace moe {
namespace {

using namespace gemm_test;  // NOLINT(google-build-using-namespace): the shared cases

const DtypePairs kBf16In = {{Dtype::bf16, Dtype::f32}, {Dtype::bf16, Dtype::bf16}};

// Weights packed per call a group of column blocks at a time (group_blocks: up to 1 MiB), a row pair across
// the group's columns: deep_kd's ten column blocks are two groups, the last ragged.
TEST(AmxEmulated, NnMatchesReference) {
  Inputs inputs(testing::test_seed());
  check_nn(inputs, kBf16In, [](auto&&... args) { amx_emulated::grouped_gemm_nn(kDefaults, args...); });
}

// Every output streamed where it can be (amx_stream_bytes 0): nn's, nn_s8's and tn's register block rows of
// 32 columns on a 64-byte line with non-temporal stores, nn_swiglu's g through an item's stage where its 32
// columns are whole lines, nn_s8_swiglu's bf16 g where its rows are (M 32); ragged or unaligned ones stored
// as before (N 2048's rows all stream). Each holds the reference's sums (nn_s8's bit for bit). Where the
// build has no AVX-512 BF16, nn's rows are stored as before and g's stage is copied out.
TEST(AmxEmulated, StreamedOutputsMatchReference) {
  GemmThresholds streaming = kDefaults;
  streaming.amx_stream_bytes = 0;
  Inputs inputs(testing::test_seed());
  check_nn(inputs, kBf16In, [&](auto&&... args) { amx_emulated::grouped_gemm_nn(streaming, args...); });
  check_nn_swiglu(inputs, kBf16In,
                  [&](auto&&... args) { amx_emulated::grouped_gemm_nn_swiglu(streaming, args...); });
  check_tn(
      inputs, kBf16In, [&](auto&&... args) { amx_emulated::grouped_gemm_tn(streaming, args...); },
      [&](auto&&... args) { gemm_detail::tn_twice<&amx_emulated::grouped_gemm_tn>(streaming, args...); });
  int8_test::check_nn_s8(testing::test_seed(),
                         [&](auto&&... args) { amx_emulated::grouped_gemm_nn_s8(streaming, args...); });
  int8_test::check_nn_s8_swiglu(testing::test_seed(), [&](auto&&... args) {
    amx_emulated::grouped_gemm_nn_s8_swiglu(streaming, args...);
  });
}

TEST(AmxEmulated, NnSwigluMatchesReference) {
  Inputs inputs(testing::test_seed());
  check_nn_swiglu(inputs, kBf16In,
                  [](auto&&... args) { amx_emulated::grouped_gemm_nn_swiglu(kDefaults, args...); });
}

// nt's padded float32 cases read two weight parts and accumulate into out.
TEST(AmxEmulated, NtMatchesReference) {
  Inputs inputs(testing::test_seed());
  check_nt(inputs, kBf16In, [](auto&&... args) { amx_emulated::grouped_gemm_nt(kDefaults, args...); });
}

// nt_swiglu_grad is the registry's composition of nt and SwiGLU's backward (gemm_detail).
TEST(AmxEmulated, NtSwigluGradMatchesReference) {
  Inputs inputs(testing::test_seed());
  check_nt_swiglu_grad(inputs, {Dtype::bf16}, [](auto&&... args) {
    gemm_detail::nt_then_swiglu_grad<&amx_emulated::grouped_gemm_nt>(kDefaults, args...);
  });
}

// Padded cases read dout as a column slice (ld_dout = N + 5) and also run with zero_padding; tn_pair is
// the registry's composition (two tn calls). dout's B tiles are packed per expert where they fit
// 1 MiB (group_blocks: few rows) and per item past it (streamed_output, tn_tile_groups).
TEST(AmxEmulated, TnMatchesReferenceAndZeroesEmptyExperts) {
  Inputs inputs(testing::test_seed());
  check_tn(
      inputs, kBf16In, [](auto&&... args) { amx_emulated::grouped_gemm_tn(kDefaults, args...); },
      [](auto&&... args) { gemm_detail::tn_twice<&amx_emulated::grouped_gemm_tn>(kDefaults, args...); });
}

// same_sums_on_any_thread_count: threads split the work list, never a sum, so 1, 2, 3 and 7 threads give
// the same bits (the ranges' edges fall in different experts and column blocks each time).
TEST(AmxEmulated, SameBitsOnAnyThreadCount) {
  Inputs inputs(testing::test_seed());
  const Groups g({37, 0, 70, 5, 33}, /*with_padding=*/true);
  const int64_t Kd = 45, N = 150;
  const Tensor lhs = inputs.random(Dtype::bf16, {g.rows(), Kd});                       // (rows, Kd)
  const Weights rhs = random_weights(inputs, Dtype::bf16, 2, g.experts(), Kd, N / 2);  // two (E, Kd, N/2)
  std::vector<Tensor> outs;
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    outs.push_back(nan_filled(Dtype::f32, {g.rows(), N}));
    amx_emulated::grouped_gemm_nn(kDefaults, outs.back().raw(), Dtype::f32, lhs.raw(), rhs.view(),
                                  Dtype::bf16, g.shape(), Kd, N);
  }
  omp_set_num_threads(threads_before);
  for (size_t i = 1; i < outs.size(); ++i)
    EXPECT_EQ(std::memcmp(outs[0].raw(), outs[i].raw(), outs[0].bytes()), 0) << "run " << i;
}

// Kept weights (ExpertWeights::packs: a forward run's): the first call packs every item's B tiles once, later
// calls read that packing; the bits are those of the weights packed per call.
TEST(AmxEmulated, KeptWeightsGiveTheBitsOfWeightsPackedPerCall) {
  Inputs inputs(testing::test_seed());
  check_kept_weights_give_the_bits(
      inputs,
      [](void* out, Dtype out_dt, const void* lhs, ExpertWeights rhs, GroupedShape g, int64_t Kd, int64_t N) {
        amx_emulated::grouped_gemm_nn(kDefaults, out, out_dt, lhs, rhs, Dtype::bf16, g, Kd, N);
        return std::string();
      },
      [](void* h, void* out, const void* lhs, ExpertWeights rhs, GroupedShape g, int64_t Kd, int64_t M) {
        amx_emulated::grouped_gemm_nn_swiglu(kDefaults, h, out, Dtype::bf16, lhs, rhs, Dtype::bf16, g, Kd, M,
                                             nullptr, true);
        return std::string();
      });
}

// The int8 kernel (src/cpu/gemm/amx/gemm_amx_s8_kernel.h) on emulated TDPBSSD tiles: every case of
// tests/int8_gemm_cases.h (odd sizes that are no multiple of a tile's 16 rows, 16 columns or 64 reduction
// elements, empty experts, padding rows, per-expert and per-column scales, accumulation, a deep reduction)
// equals the integer reference bit for bit, as the hardware's must (its int32 sums are exact too).
TEST(AmxEmulated, NnS8EqualsTheIntegerReferenceBitForBit) {
  int8_test::check_nn_s8(testing::test_seed(),
                         [](auto&&... args) { amx_emulated::grouped_gemm_nn_s8(kDefaults, args...); });
}

TEST(AmxEmulated, NnS8SwigluMatchesTheReference) {
  int8_test::check_nn_s8_swiglu(testing::test_seed(), [](auto&&... args) {
    amx_emulated::grouped_gemm_nn_s8_swiglu(kDefaults, args...);
  });
}

TEST(AmxEmulated, NnS8ExtremeValuesSumExactly) {
  int8_test::check_nn_s8_extremes(
      [](auto&&... args) { amx_emulated::grouped_gemm_nn_s8(kDefaults, args...); });
}

// Kd = 0 (an empty reduction: every live sum is zero, dequantized) on 1 and 3 threads.
TEST(AmxEmulated, NnS8EmptyReductionGivesZeros) {
  const int64_t offset[] = {0, 5, 5, 40};
  const int64_t live[] = {3, 0, 35};
  const int64_t N = 70;
  const std::vector<float> ls(40, 0.5f), rs(3, 2.0f);
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    Tensor got = nan_filled(Dtype::f32, {40, N});
    amx_emulated::grouped_gemm_nn_s8(kDefaults, got.raw(), Dtype::f32,
                                     {nullptr, ls.data(), nullptr, rs.data()}, {offset, 3, live}, 0, N,
                                     false);
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.get(i), 0.0f) << i;
  }
  omp_set_num_threads(threads_before);
}

// nn_s8 and nn_s8_swiglu on weights packed once (Int8Operands::rhs_packs: int8_routed_prequant's, every
// expert's B tiles on the first call, both forms' layouts in one WeightPacks) give the bits of weights packed
// per call (nn_s8's: the reference's), also in a second call whose rows reach experts the first left empty;
// nn_s8_swiglu's items of 32 to 256 rows (M 23: 256; M 1026: 96, so an expert's 130 rows are an item of 96
// and one of 34). The emulated tiles everywhere, the hardware's on AMX.
template <class NnS8, class NnS8Swiglu>
void check_s8_kept(NnS8 nn_s8, NnS8Swiglu nn_s8_swiglu) {
  uint64_t key = testing::test_seed() + 31;
  struct Shape {
    int64_t Kd, M;
    std::vector<std::vector<int64_t>> offsets;  // E + 1 each
  };
  const Shape shapes[] = {{66, 23, {{0, 0, 30, 30, 41}, {0, 17, 17, 60, 61}}},
                          {130, 1026, {{0, 130, 130, 133}, {0, 1, 40, 41}}}};
  for (const Shape& shape : shapes) {
    const int64_t E = int64_t(shape.offsets[0].size()) - 1, Kd = shape.Kd, M = shape.M, N = 2 * M;
    const std::vector<int8_t> rhs = int8_test::random_s8(E * Kd * N, ++key);
    const std::vector<float> rs = int8_test::random_scales(E, ++key);
    WeightPacks packs;
    for (const std::vector<int64_t>& offset : shape.offsets) {
      const int64_t rows = offset.back();
      SCOPED_TRACE("M " + std::to_string(M) + ", rows " + std::to_string(rows));
      const std::vector<int8_t> lhs = int8_test::random_s8(rows * Kd, ++key);
      const std::vector<float> ls = int8_test::random_scales(rows, ++key);
      Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data()};
      const GroupedShape groups{offset.data(), E};
      Tensor want_h(Dtype::bf16, {rows, N}), h(Dtype::bf16, {rows, N});
      Tensor want_g(Dtype::bf16, {rows, M}), g(Dtype::bf16, {rows, M});
      Tensor want(Dtype::f32, {rows, N}), got(Dtype::f32, {rows, N});
      std::vector<int8_t> want_q(size_t(rows * M)), q(want_q.size());
      std::vector<float> want_scale(static_cast<size_t>(rows)), scale(want_scale.size());
      ref_gemm::grouped_gemm_nn_s8(kDefaults, want.raw(), Dtype::f32, in, groups, Kd, N, false);
      nn_s8_swiglu(kDefaults, {want_h.raw(), want_g.raw(), want_q.data(), want_scale.data()}, Dtype::bf16, in,
                   {}, groups, Kd, M, nullptr);
      in.rhs_packs = &packs;
      nn_s8(kDefaults, got.raw(), Dtype::f32, in, groups, Kd, N, false);
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), size_t(rows * N) * 4), 0) << "nn_s8";
      nn_s8_swiglu(kDefaults, {h.raw(), g.raw(), q.data(), scale.data()}, Dtype::bf16, in, {}, groups, Kd, M,
                   nullptr);
      EXPECT_EQ(std::memcmp(h.raw(), want_h.raw(), size_t(rows * N) * 2), 0) << "h";
      EXPECT_EQ(std::memcmp(g.raw(), want_g.raw(), size_t(rows * M) * 2), 0) << "g";
      EXPECT_EQ(q, want_q);
      EXPECT_EQ(scale, want_scale);
    }
  }
}

TEST(AmxEmulated, S8OnKeptWeightsEqualsPackedPerCall) {
  check_s8_kept(&amx_emulated::grouped_gemm_nn_s8, &amx_emulated::grouped_gemm_nn_s8_swiglu);
}

TEST(AmxVariant, S8OnKeptWeightsEqualsPackedPerCall) {
  if (!gemm_variant("amx")->unavailable().empty()) GTEST_SKIP() << gemm_variant("amx")->unavailable();
  check_s8_kept(&cpu::isa_amx::grouped_gemm_nn_s8, &cpu::isa_amx::grouped_gemm_nn_s8_swiglu);
}

// The variant's rows: the grouped float forms of bf16 inputs and nn_s8; dense and float32 inputs refused
// with a reason (the table runs the next row); off AMX, unavailable says why.
TEST(AmxVariant, SupportsItsFormsOfBf16AndSaysWhyNot) {
  const GemmVariant* v = gemm_variant("amx");
  ASSERT_NE(v, nullptr);
  GemmCall call;
  call.in_dtype = call.b_dtype = Dtype::bf16;
  for (GemmForm f : kGemmForms) {
    call.form = f;
    call.in_dtype = call.b_dtype = f == GemmForm::nn_s8 ? Dtype::s8 : Dtype::bf16;
    EXPECT_EQ(v->supports(call, kDefaults).empty(), f != GemmForm::dense) << name(f);
  }
  call.form = GemmForm::nn;
  call.in_dtype = call.b_dtype = Dtype::f32;
  EXPECT_NE(v->supports(call, kDefaults), "");
  call.form = GemmForm::nt;
  call.in_dtype = call.b_dtype = Dtype::bf16;
  call.out_dtype = Dtype::bf16;
  call.accumulate = true;
  EXPECT_NE(v->supports(call, kDefaults), "") << "accumulating into bf16";
  EXPECT_EQ(v->unavailable().empty(), isa_level() >= IsaLevel::amx) << v->unavailable();
}

}  // namespace
}  // namespace moe
