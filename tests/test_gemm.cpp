// Every form of the cpu backend's kernel table (cpu/gemm/gemm.h), run as `--gemm-variant V` runs it (V's row
// where its supports() takes the call, the table's next row elsewhere), against the plain reference of
// src/ref/gemm.cpp: its float64 sums of the very values the kernel reads (bf16 inputs are what they
// store). Fresh random inputs each run; the seed is printed (MOE_TEST_SEED replays).
//
// Tolerance, per output element, in terms of S = sum_k |a_ik b_kj| (the reference on the inputs' absolute
// values: the scale of any rounding error a GEMM accumulating in f32 can make, immune to cancellation):
//   f32 output:  |got - want| <= 1e-5 S          (f32 accumulation; ~sqrt(k) * 6e-8 S in practice)
//   bf16 output: adds 4e-3 |want|                 (one rounding to bf16: half an ulp is 2^-9 = 2e-3)
//   f16 output:  adds 5e-4 |want| + 2^-24         (one rounding to float16: half an ulp is 2^-12, and the
//                                                  subnormals below 2^-14 are 2^-24 apart)
// float16 calls reach every variant widened to float32 by the table (cpu/gemm/f16_widening.h).
// Outputs are pre-filled with NaN so an element the kernel forgets to write fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/gemm_gemv.h"
#include "cpu/gemm/gemm_variants.h"
#include "gemm_cases.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "ref/gemm.h"
#include "test_util.h"

namespace moe {
namespace {

using namespace gemm_test;  // NOLINT(google-build-using-namespace): the shared cases

// Every variant of the registry runs every test below, as --gemm-variant names it: a table whose base order
// puts its rows first (no tuning file: nothing is measured).
class EveryGemmVariant : public ::testing::TestWithParam<std::string> {};

KernelConfig variant_config(const std::string& name) {
  KernelConfig k;
  k.gemm_variant = name;
  k.tuning_file = "none";
  return k;
}

// Why variant `name` cannot run here ("not built", or its unavailable()), "" where it can.
std::string unavailable_here(const std::string& name) {
  const GemmVariant* v = gemm_variant(name);
  return v ? v->unavailable() : "not built";
}

#define MOE_TABLE_OR_SKIP(name)                                                  \
  if (const GemmVariant* v = gemm_variant(name); v && !v->unavailable().empty()) \
    GTEST_SKIP() << (name) << ": " << v->unavailable();                          \
  GemmKernels table(variant_config(name), nullptr)

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const GemmVariant& v : gemm_variants()) names.push_back(v.name);
  return names;
}

TEST_P(EveryGemmVariant, NnMatchesReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_nn(inputs,
           {{Dtype::f32, Dtype::f32},
            {Dtype::f32, Dtype::bf16},
            {Dtype::bf16, Dtype::f32},
            {Dtype::bf16, Dtype::bf16},
            {Dtype::f16, Dtype::f32},
            {Dtype::f16, Dtype::f16}},
           [&](auto&&... args) { table.nn(args...); });
}

// gemm_cases.h's check: h against the plain sums, g against SwiGLU of the stored h, keep_h = false alike.
TEST_P(EveryGemmVariant, NnSwigluMatchesReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_nn_swiglu(inputs, {{Dtype::f32, Dtype::f32}, {Dtype::bf16, Dtype::bf16}, {Dtype::f16, Dtype::f16}},
                  [&](auto&&... args) { table.nn_swiglu(args...); });
}

TEST_P(EveryGemmVariant, NtMatchesReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_nt(inputs,
           {{Dtype::f32, Dtype::f32},
            {Dtype::f32, Dtype::bf16},
            {Dtype::bf16, Dtype::f32},
            {Dtype::bf16, Dtype::bf16},
            {Dtype::f16, Dtype::f32},
            {Dtype::f16, Dtype::f16}},
           [&](auto&&... args) { table.nt(args...); });
}

TEST_P(EveryGemmVariant, NtSwigluGradMatchesReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_nt_swiglu_grad(inputs, {Dtype::f32, Dtype::bf16, Dtype::f16},
                       [&](auto&&... args) { table.nt_swiglu_grad(args...); });
}

TEST_P(EveryGemmVariant, TnMatchesReferenceAndZeroesEmptyExperts) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_tn(
      inputs,
      {{Dtype::f32, Dtype::f32},
       {Dtype::f32, Dtype::bf16},
       {Dtype::bf16, Dtype::f32},
       {Dtype::bf16, Dtype::bf16},
       {Dtype::f16, Dtype::f32},
       {Dtype::f16, Dtype::f16}},
      [&](auto&&... args) { table.tn(args...); }, [&](auto&&... args) { table.tn_pair(args...); });
}

// A NaN and an infinity in tn's inputs reach the gradient as the float64 reference gives them: NaN where it
// is NaN (a NaN lhs value, an infinity times a zero), the same infinity where it is one, the rest within the
// tolerance. A variant's rounding may check a tile for NaN once (gemv ymm: any_nan) instead of each value:
// groups of 1-4 rows, 128 columns (whole tiles of 64). (NaNs made from bf16 values never carry into the
// exponent when rounded without the check: test_dtype's AnyNanGuardsTheRoundingWithoutItsNanBlend tests the
// check itself on every payload.)
TEST_P(EveryGemmVariant, TnKeepsNaNAndInfinity) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  const Groups g({1, 4, 0, 3}, false);
  const int64_t Kd = 5, N = 128;
  for (Dtype out_dt : {Dtype::bf16, Dtype::f32}) {
    SCOPED_TRACE(trace(Dtype::bf16, out_dt));
    Tensor lhs = inputs.random(Dtype::bf16, {g.rows(), Kd});       // (rows, Kd)
    Tensor dout = inputs.random(Dtype::bf16, {g.rows(), N});       // (rows, N)
    lhs.set(0 * Kd + 1, std::numeric_limits<float>::quiet_NaN());  // expert 0's gradient row 1
    lhs.set(2 * Kd + 3, std::numeric_limits<float>::infinity());   // expert 1's gradient row 3
    dout.set(2 * N + 7, 0.0);                                      // ... and there inf x 0 = NaN at column 7
    lhs.set(6 * Kd + 0, -std::numeric_limits<float>::infinity());  // expert 3's gradient row 0
    Tensor drhs = nan_filled(out_dt, {g.experts(), Kd, N});        // (E, Kd, N)
    table.tn(drhs.raw(), out_dt, lhs.raw(), dout.raw(), Dtype::bf16, g.shape(), Kd, N, N);
    const Expected want = reference(drhs.numel(), [&](double* o, bool abs) {
      ref_gemm::grouped_gemm_tn(kDefaults, o, Dtype::f64, (abs ? abs_of(lhs) : lhs).raw(),
                                (abs ? abs_of(dout) : dout).raw(), Dtype::bf16, g.shape(), Kd, N, N);
    });
    int64_t nans = 0, infinities = 0, bad = 0;
    for (int64_t i = 0; i < drhs.numel(); ++i) {
      const double w = want.value[size_t(i)], got = drhs.get(i);
      nans += std::isnan(w);
      infinities += std::isinf(w);
      const bool ok = std::isnan(w)   ? std::isnan(got)
                      : std::isinf(w) ? got == w
                                      : std::fabs(got - w) <= 1e-5 * want.scale[size_t(i)] +
                                                                  stored_rounding(out_dt) * std::fabs(w) +
                                                                  stored_floor(out_dt);
      if (!ok && ++bad <= 5) ADD_FAILURE() << "element " << i << ": got " << got << ", want " << w;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(nans, N + 1) << "the case: a NaN row and one inf x 0";
    EXPECT_EQ(infinities, 2 * N - 1) << "the case: two rows of infinities";
  }
}

// Weights kept across calls (a forward run's, ExpertWeights::packs), each call's packs fresh: the first call
// with them packs (gemv: in tile order) and reads that packing.
TEST_P(EveryGemmVariant, NnOnKeptWeightsMatchesReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_nn(inputs, {{Dtype::f32, Dtype::f32}, {Dtype::bf16, Dtype::f32}, {Dtype::bf16, Dtype::bf16}},
           [&](void* out, Dtype out_dt, const void* lhs, ExpertWeights rhs, Dtype in, GroupedShape groups,
               int64_t Kd, int64_t N) {
             WeightPacks packs;
             table.nn(out, out_dt, lhs, rhs.kept(&packs), in, groups, Kd, N);
           });
}

// A variant that packs kept weights gives the bits it gives reading them in place (gemm_cases.h's check).
// Where kept weights take the variant further than in place (gemv's ymm instance: groups of 65-128 rows) the
// two runs are different kernels, compared to the reference alone (NnOnKeptWeightsMatchesReference).
TEST_P(EveryGemmVariant, KeptWeightsGiveTheBitsOfWeightsReadInPlace) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  check_kept_weights_give_the_bits(
      inputs,
      [&](void* out, Dtype out_dt, const void* lhs, ExpertWeights rhs, GroupedShape g, int64_t Kd,
          int64_t N) {
        table.nn(out, out_dt, lhs, rhs, Dtype::bf16, g, Kd, N);
        return table.take_choices();
      },
      [&](void* h, void* out, const void* lhs, ExpertWeights rhs, GroupedShape g, int64_t Kd, int64_t M) {
        table.nn_swiglu(h, out, Dtype::bf16, lhs, rhs, Dtype::bf16, g, Kd, M, nullptr, true);
        return table.take_choices();
      });
}

// A padding_kept check's outputs: rows of `width`, NaN in the live rows and `left` in the padding rows (3;
// float16 0, whose widened forms may write the padding's zeros).
class KeptPadding {
 public:
  KeptPadding(const Groups& g, Dtype dt) : g_(g), dt_(dt), left_(dt == Dtype::f16 ? 0.0 : 3.0) {}
  GroupedShape kept() const {
    GroupedShape shape = g_.shape();
    shape.padding_kept = true;
    return shape;
  }
  Tensor output(int64_t width) const { return left_in_padding(nan_filled(dt_, {g_.rows(), width}), width); }
  // `got`, written with padding_kept, is `want`, written without it, with the padding rows left.
  void expect_same(Tensor want, const Tensor& got, int64_t width, const char* what) const {
    want = left_in_padding(std::move(want), width);
    EXPECT_EQ(std::memcmp(want.raw(), got.raw(), want.bytes()), 0) << what;
  }

 private:
  Tensor left_in_padding(Tensor t, int64_t width) const {
    for (int64_t e = 0; e < g_.experts(); ++e)
      for (int64_t i = g_.live_end(e) * width; i < g_.offset[size_t(e + 1)] * width; ++i) t.set(i, left_);
    return t;
  }
  const Groups& g_;
  Dtype dt_;
  double left_;
};

// fn(case, dtype, groups, padding) over the group cases, padded, in every dtype.
template <typename Fn>
void for_each_kept_padding_case(Fn&& fn) {
  for (const GroupCase& c : kGroupCases)
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt));
      const Groups g(c.sizes, /*with_padding=*/true);
      fn(c, dt, g, KeptPadding(g, dt));
    }
}

// GroupedShape::padding_kept: the caller keeps the outputs' padding rows zeros (a forward run's row buffers),
// so nn and nn_swiglu write the live rows alone and leave the others as they are (the table's GroupSplit runs
// a call's few-row and many-row groups as two calls into one output on that): the live rows are the call's
// without it, bit for bit, and the padding rows are left.
TEST_P(EveryGemmVariant, PaddingKeptWritesTheLiveRowsAlone) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  for_each_kept_padding_case([&](const GroupCase& c, Dtype dt, const Groups& g, const KeptPadding& padding) {
    const GroupedShape kept = padding.kept();
    const Weights rhs = random_weights(inputs, dt, 1, g.experts(), c.Kd, c.N);
    const int64_t N = rhs.cols();
    const Tensor lhs = inputs.random(dt, {g.rows(), c.Kd});  // (rows, Kd)
    Tensor want = nan_filled(dt, {g.rows(), N}), got = padding.output(N);
    table.nn(want.raw(), dt, lhs.raw(), rhs.view(), dt, g.shape(), c.Kd, N);
    table.nn(got.raw(), dt, lhs.raw(), rhs.view(), dt, kept, c.Kd, N);
    padding.expect_same(want, got, N, "nn");
    if (N % 2 != 0) return;
    Tensor h_want = nan_filled(dt, {g.rows(), N}), h_got = padding.output(N);  // (rows, 2M)
    Tensor g_want = nan_filled(dt, {g.rows(), N / 2}), g_got = padding.output(N / 2);
    table.nn_swiglu(h_want.raw(), g_want.raw(), dt, lhs.raw(), rhs.view(), dt, g.shape(), c.Kd, N / 2,
                    nullptr, true);
    table.nn_swiglu(h_got.raw(), g_got.raw(), dt, lhs.raw(), rhs.view(), dt, kept, c.Kd, N / 2, nullptr,
                    true);
    padding.expect_same(h_want, h_got, N, "nn_swiglu h");
    padding.expect_same(g_want, g_got, N / 2, "nn_swiglu g");
  });
}

// padding_kept for the backward forms: nt and nt_swiglu_grad write dx's and dh's live rows alone too (dg is
// scratch), so the table splits their calls as it does nn's.
TEST_P(EveryGemmVariant, PaddingKeptBackwardWritesTheLiveRowsAlone) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  for_each_kept_padding_case([&](const GroupCase& c, Dtype dt, const Groups& g, const KeptPadding& padding) {
    const GroupedShape kept = padding.kept();
    const int64_t M = c.Kd, N = c.N;
    const Weights rhs = random_weights(inputs, dt, 1, g.experts(), M, N);  // (E, M, N)
    const Tensor dout = inputs.random(dt, {g.rows(), N});                  // (rows, N)
    Tensor want = nan_filled(dt, {g.rows(), M}), got = padding.output(M);  // (rows, M)
    table.nt(want.raw(), dt, dout.raw(), rhs.view(), dt, g.shape(), M, N, false);
    table.nt(got.raw(), dt, dout.raw(), rhs.view(), dt, kept, M, N, false);
    padding.expect_same(want, got, M, "nt");
    const Tensor h = inputs.random(dt, {g.rows(), 2 * M});  // (rows, 2M) [gate | up]
    Tensor dh_want = nan_filled(dt, {g.rows(), 2 * M}), dh_got = padding.output(2 * M);
    Tensor dg = nan_filled(dt, {g.rows(), M});  // (rows, M) scratch
    table.nt_swiglu_grad(dh_want.raw(), dg.raw(), dout.raw(), rhs.view(), h.raw(), dt, g.shape(), M, N,
                         nullptr);
    table.nt_swiglu_grad(dh_got.raw(), dg.raw(), dout.raw(), rhs.view(), h.raw(), dt, kept, M, N, nullptr);
    padding.expect_same(dh_want, dh_got, 2 * M, "nt_swiglu_grad dh");
  });
}

// The cached primitives and reused scratch must not leak state from one call into the next.
TEST_P(EveryGemmVariant, RepeatedCallsAreBitwiseIdentical) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  const Groups g({600, 0, 130}, /*with_padding=*/true);
  const int64_t Kd = 40, N = 24;
  for (Dtype in : kDtypes) {
    SCOPED_TRACE(dtype_name(in));
    const Tensor lhs = inputs.random(in, {g.rows(), Kd});          // (rows, Kd)
    const Tensor rhs = inputs.random(in, {g.experts(), Kd, N});    // (E, Kd, N)
    const Tensor other = inputs.random(in, {g.experts(), Kd, N});  // (E, Kd, N)
    Tensor first(in, {g.rows(), N}), again(in, {g.rows(), N});     // (rows, N)
    table.nn(first.raw(), in, lhs.raw(), rhs.raw(), in, g.shape(), Kd, N);
    table.nn(again.raw(), in, lhs.raw(), other.raw(), in, g.shape(), Kd, N);
    table.nn(again.raw(), in, lhs.raw(), rhs.raw(), in, g.shape(), Kd, N);
    EXPECT_EQ(std::memcmp(first.raw(), again.raw(), first.bytes()), 0);
  }
}

// A variant that keeps staged operands across calls (gemv's nn and tn: a group's lhs rows, and dout, a
// thread's last expert's) reads them again where a call brings new values at the same addresses: the calls
// on rewritten inputs give the bits of the same calls on a fresh copy of them (nn, nt and tn; 1-3 threads).
TEST_P(EveryGemmVariant, InputsRewrittenInPlaceAreReadAfresh) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  // One group: each thread's first item in a call is the one its last took in the call before.
  const Groups g({15}, /*with_padding=*/false);
  const int64_t Kd = 77, N = 200;
  const int threads_before = omp_get_max_threads();
  for (Dtype in : kDtypes)
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + ", " + std::to_string(threads) + " threads");
      omp_set_num_threads(threads);
      const Tensor rhs = inputs.random(in, {g.experts(), Kd, N});  // (E, Kd, N)
      Tensor lhs = inputs.random(in, {g.rows(), Kd});              // (rows, Kd)
      Tensor dout = inputs.random(in, {g.rows(), N});              // (rows, N)
      // nn (rows, N), nt (rows, Kd) and tn (E, Kd, N) of lhs and dout.
      auto calls = [&](const Tensor& l, const Tensor& d) {
        std::vector<Tensor> o{Tensor(in, {g.rows(), N}), Tensor(in, {g.rows(), Kd}),
                              Tensor(in, {g.experts(), Kd, N})};
        table.nn(o[0].raw(), in, l.raw(), rhs.raw(), in, g.shape(), Kd, N);
        table.nt(o[1].raw(), in, d.raw(), rhs.raw(), in, g.shape(), Kd, N, false);
        table.tn(o[2].raw(), in, l.raw(), d.raw(), in, g.shape(), Kd, N, N);
        return o;
      };
      calls(lhs, dout);  // what a variant stages from these addresses, before they are rewritten
      const Tensor next_lhs = inputs.random(in, {g.rows(), Kd});  // (rows, Kd)
      const Tensor next_dout = inputs.random(in, {g.rows(), N});  // (rows, N)
      std::memcpy(lhs.raw(), next_lhs.raw(), next_lhs.bytes());
      std::memcpy(dout.raw(), next_dout.raw(), next_dout.bytes());
      const std::vector<Tensor> in_place = calls(lhs, dout), want = calls(next_lhs, next_dout);
      const char* forms[] = {"nn", "nt", "tn"};
      for (size_t f = 0; f < want.size(); ++f)
        EXPECT_EQ(std::memcmp(in_place[f].raw(), want[f].raw(), want[f].bytes()), 0) << forms[f];
    }
  omp_set_num_threads(threads_before);
}

// Whether every variant a table's choices name (take_choices: "nn:avx2,nt:avx2+onednn") claims sums that do
// not depend on the thread count.
bool all_claim_same_sums(const std::string& choices) {
  size_t at = 0;
  while ((at = choices.find_first_of(":+", at)) != std::string::npos) {
    const size_t end = choices.find_first_of(",+", at + 1);
    const std::string name = choices.substr(at + 1, end == std::string::npos ? end : end - at - 1);
    const GemmVariant* v = gemm_variant(name);
    if (!v || !v->same_sums_on_any_thread_count()) return false;
    at += 1;
  }
  return true;
}

// same_sums_on_any_thread_count() is a claim the block's bitwise checks rely on: a variant making it gives
// the same bits for nn (two weight parts, a reduction longer than one panel), nt (accumulating into its
// float32 out) and tn on 1, 2, 3 and 7 threads (column slices start and end in other places each time; with 7
// some threads get none).
TEST_P(EveryGemmVariant, SameBitsOnAnyThreadCountWhereClaimed) {
  MOE_TABLE_OR_SKIP(GetParam());
  if (!gemm_variant(GetParam())->same_sums_on_any_thread_count())
    GTEST_SKIP() << GetParam() << " declares sums that may change with the thread count";
  Inputs inputs(testing::test_seed());
  const Groups g({37, 0, 300, 5, 33}, /*with_padding=*/true);
  const int64_t Kd = 300, N = 150;
  const int threads_before = omp_get_max_threads();
  for (Dtype in : kDtypes) {
    SCOPED_TRACE(dtype_name(in));
    const Tensor lhs = inputs.random(in, {g.rows(), Kd});                       // (rows, Kd)
    const Weights rhs = random_weights(inputs, in, 2, g.experts(), Kd, N / 2);  // two (E, Kd, N/2)
    const Tensor dout = inputs.random(in, {g.rows(), N});                       // (rows, N)
    const Tensor start = inputs.random(Dtype::f32, {g.rows(), Kd});             // nt accumulates onto it
    const Tensor dense_b = inputs.random(Dtype::f32, {Kd, N});                  // dense's b, read transposed
    std::vector<std::vector<Tensor>> outs;
    std::vector<std::string> choices;
    for (int threads : {1, 2, 3, 7}) {
      omp_set_num_threads(threads);
      std::vector<Tensor> o;
      o.push_back(nan_filled(in, {g.rows(), N}));  // nn (rows, N)
      table.nn(o.back().raw(), in, lhs.raw(), rhs.view(), in, g.shape(), Kd, N);
      o.push_back(start.to(Dtype::f32));  // nt (rows, Kd)
      table.nt(o.back().raw(), Dtype::f32, dout.raw(), rhs.view(), in, g.shape(), Kd, N, /*accumulate=*/true);
      o.push_back(nan_filled(in, {g.experts(), Kd, N}));  // tn (E, Kd, N)
      table.tn(o.back().raw(), in, lhs.raw(), dout.raw(), in, g.shape(), Kd, N, N);
      o.push_back(nan_filled(Dtype::f32, {g.rows(), Kd}));  // dense (rows, Kd) = dout @ (Kd, N)^T
      table.dense(o.back().raw(), Dtype::f32, dout.raw(), in, dense_b.raw(), Dtype::f32, g.rows(), N, Kd,
                  /*trans_a=*/false, /*trans_b=*/true);
      outs.push_back(std::move(o));
      choices.push_back(table.take_choices());
    }
    omp_set_num_threads(threads_before);
    for (size_t i = 1; i < outs.size(); ++i) {
      SCOPED_TRACE("run " + std::to_string(i) + ": " + choices[i]);
      if (choices[i] != choices[0] || !all_claim_same_sums(choices[i])) continue;  // another row ran a form
      for (size_t f = 0; f < outs[i].size(); ++f)
        EXPECT_EQ(std::memcmp(outs[0][f].raw(), outs[i][f].raw(), outs[0][f].bytes()), 0) << "form " << f;
    }
  }
}

// ---- dense ----------------------------------------------------------------------------------------

struct DenseCase {
  int64_t R, Kd, N;
};

// Includes R = 0 and Kd = 0 (an empty sum: zeros), and R across both packing thresholds.
// 65 x 63 x 17: where oneDNN's AMX brgemm died on a transposed bf16 B at 16 threads (the onednn rows
// leave that product to the next row; the plain one stays with them).
const DenseCase kDenseCases[] = {{1, 17, 3},   {3, 63, 65}, {65, 1, 17}, {600, 33, 9},
                                 {4100, 9, 5}, {0, 5, 7},   {5, 0, 7},   {65, 63, 17}};

TEST_P(EveryGemmVariant, DenseAllTransposesAndDtypeMixesMatchReference) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  for (const DenseCase& c : kDenseCases) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        for (Dtype a_dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
          for (Dtype b_dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
            for (Dtype out_dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
              SCOPED_TRACE("R " + std::to_string(c.R) + " Kd " + std::to_string(c.Kd) + " N " +
                           std::to_string(c.N) + ", trans_a " + std::to_string(trans_a) + " trans_b " +
                           std::to_string(trans_b) + ", a " + dtype_name(a_dt) + " b " + dtype_name(b_dt) +
                           " out " + dtype_name(out_dt));
              const Tensor a = trans_a ? inputs.random(a_dt, {c.Kd, c.R}) : inputs.random(a_dt, {c.R, c.Kd});
              const Tensor b = trans_b ? inputs.random(b_dt, {c.N, c.Kd}) : inputs.random(b_dt, {c.Kd, c.N});
              const Tensor a_abs = abs_of(a), b_abs = abs_of(b);
              Tensor out = nan_filled(out_dt, {c.R, c.N});  // (R, N)
              table.dense(out.raw(), out_dt, a.raw(), a_dt, b.raw(), b_dt, c.R, c.Kd, c.N, trans_a, trans_b);
              expect_close(out, reference(out.numel(), [&](double* o, bool abs) {
                             ref_gemm::dense_gemm(kDefaults, o, Dtype::f64, (abs ? a_abs : a).raw(), a_dt,
                                                  (abs ? b_abs : b).raw(), b_dt, c.R, c.Kd, c.N, trans_a,
                                                  trans_b);
                           }));
            }
          }
        }
      }
    }
  }
}

// --gemm-variant V runs V's row wherever V's supports() takes the call, the table's next row elsewhere, and
// take_choices() says which per form: nothing is delegated behind a row's back.
// A call whose groups have both at most gemv_max_rows(false) live rows (weights read in place) and more runs
// as two (the table's GroupSplit): each part's row is the one its largest group picks, and take_choices()
// names both.
TEST_P(EveryGemmVariant, TheTableNamesTheRowThatRan) {
  MOE_TABLE_OR_SKIP(GetParam());
  Inputs inputs(testing::test_seed());
  const GemmVariant& v = *gemm_variant(GetParam());
  for (const GroupCase& c : kGroupCases) {
    const Groups g(c.sizes, false);
    int64_t few = 0, many = 0;  // the largest group of each part
    for (int64_t s : c.sizes) {
      int64_t& part = s > gemv_max_rows(false) ? many : few;
      part = std::max(part, s);
    }
    const std::vector<int64_t> parts =
        few > 0 && many > 0 ? std::vector<int64_t>{few, many} : std::vector<int64_t>{std::max(few, many)};
    for (Dtype dt : kDtypes) {
      const Tensor lhs = inputs.random(dt, {g.rows(), c.Kd});
      const Tensor rhs = inputs.random(dt, {g.experts(), c.Kd, c.N});
      Tensor out(dt, {g.rows(), c.N});
      (void)table.take_choices();
      table.nn(out.raw(), dt, lhs.raw(), rhs.raw(), dt, g.shape(), c.Kd, c.N);
      std::vector<bool> ran(gemm_variants().size());
      for (int64_t rows : parts) {
        GemmCall call;
        call.in_dtype = call.b_dtype = call.out_dtype = dt;
        call.rows = rows;
        call.experts = g.experts();
        call.Kd = c.Kd;
        call.N = c.N;
        const std::string why = v.supports(call, kDefaults);
        const GemmRow& row = table.row_for(call);
        EXPECT_EQ(why.empty(), row.variant == &v) << c.name << " " << dtype_name(dt) << ": " << why;
        ran[size_t(row.variant - gemm_variants().data())] = true;
      }
      std::string names;
      for (size_t i = 0; i < ran.size(); ++i)
        if (ran[i]) names += (names.empty() ? "" : "+") + std::string(gemm_variants()[i].name);
      EXPECT_EQ(table.take_choices(), "nn:" + names) << c.name;
    }
  }
}

// A tn whose experts have both at most kGemvTnMaxRows live rows and more runs as calls over runs of
// consecutive experts of one kind (the table's ExpertRuns): gemv's row takes the few-row runs, the next row
// the others, each writing its own experts' gradients (zeros where no row reached one), as the reference's.
TEST(GemmTable, TnRunsFewRowAndManyRowExpertsApart) {
  if (const std::string why = unavailable_here("gemv"); !why.empty()) GTEST_SKIP() << "gemv: " << why;
  GemmKernels table(variant_config("gemv"), nullptr);
  Inputs inputs(testing::test_seed());
  const Groups g({3, 0, kGemvTnMaxRows + 9, 1, 0, 2}, false);
  const int64_t Kd = 24, N = 40;
  const Tensor lhs = inputs.random(Dtype::bf16, {g.rows(), Kd});  // (rows, Kd)
  const Tensor dout = inputs.random(Dtype::bf16, {g.rows(), N});  // (rows, N)
  Tensor drhs = nan_filled(Dtype::f32, {g.experts(), Kd, N});     // (E, Kd, N)
  (void)table.take_choices();
  table.tn(drhs.raw(), Dtype::f32, lhs.raw(), dout.raw(), Dtype::bf16, g.shape(), Kd, N, N);
  const std::string ran = table.take_choices();
  EXPECT_EQ(ran.rfind("tn:gemv+", 0), 0u) << ran;
  const Tensor lhs_abs = abs_of(lhs), dout_abs = abs_of(dout);
  expect_close(drhs, reference(drhs.numel(), [&](double* o, bool abs) {
                 ref_gemm::grouped_gemm_tn(kDefaults, o, Dtype::f64, (abs ? lhs_abs : lhs).raw(),
                                           (abs ? dout_abs : dout).raw(), Dtype::bf16, g.shape(), Kd, N, N);
               }));
}

// The thresholds are the config's: dpbf16's largest group moves with dpbf16_max_group_rows.
TEST(GemmTable, ThresholdsComeFromTheKernelConfig) {
  if (const std::string why = unavailable_here("dpbf16"); !why.empty()) GTEST_SKIP() << "dpbf16: " << why;
  KernelConfig k = variant_config("dpbf16");
  k.thresholds.dpbf16_max_group_rows = 16;
  GemmKernels table(k, nullptr);
  Inputs inputs(testing::test_seed());
  const Groups small({16, 3}, false), large({17, 3}, false);
  // Kd and N whole 32-element tiles: where oneDNN runs AMX its rows take no other bf16 product.
  for (const Groups* g : {&small, &large}) {
    const Tensor lhs = inputs.random(Dtype::bf16, {g->rows(), 32}),
                 rhs = inputs.random(Dtype::bf16, {2, 32, 64});
    Tensor out = nan_filled(Dtype::bf16, {g->rows(), 64});
    table.nn(out.raw(), Dtype::bf16, lhs.raw(), rhs.raw(), Dtype::bf16, g->shape(), 32, 64);
    expect_close(out, nn_reference(*g, lhs, Weights{{rhs}, 64}, 32));
    // Above the threshold a later row runs it (gemv's, where it takes 17 rows, else oneDNN's).
    const std::string ran = table.take_choices();
    if (g == &small)
      EXPECT_EQ(ran, "nn:dpbf16");
    else
      EXPECT_NE(ran, "nn:dpbf16");
  }
}

// A KernelConfig built in code (no flag or file sets the thresholds) is refused by name where a threshold
// is out of its range, before any kernel reads it.
TEST(GemmTable, ThresholdsOutOfRangeAreRefusedByName) {
  EXPECT_TRUE(GemmThresholds{}.validate().is_ok());
  for (int64_t GemmThresholds::*field :
       {&GemmThresholds::dpbf16_max_group_rows, &GemmThresholds::dpbf16_min_f32_swiglu_rows,
        &GemmThresholds::dpbf16_stream_bytes, &GemmThresholds::dpbf16_tn_group_bytes,
        &GemmThresholds::avx2_panel_cols, &GemmThresholds::amx_stream_bytes}) {
    for (int64_t bad : {int64_t(-1), (int64_t(1) << 40) + 1}) {
      GemmThresholds t;
      t.*field = bad;
      const Status s = t.validate();
      ASSERT_FALSE(s.is_ok()) << bad;
      EXPECT_NE(s.message().find("invalid GEMM threshold"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s.message();
    }
  }
  for (int64_t cols : {0, 8, 24, 1000}) {
    KernelConfig k;
    k.thresholds.avx2_panel_cols = cols;
    const Status s = k.validate();
    ASSERT_FALSE(s.is_ok()) << cols;
    EXPECT_NE(
        s.message().find("avx2_panel_cols=" + std::to_string(cols) + ": must be a positive multiple of 16"),
        std::string::npos)
        << s.message();
  }
  for (int64_t cols : {16, 48, 4096}) {
    KernelConfig k;
    k.thresholds.avx2_panel_cols = cols;
    EXPECT_TRUE(k.validate().is_ok()) << cols;
  }
}

// avx2's panels narrower than a thread's columns (avx2_panel_cols 48: several panels a thread, each
// packing its weights and staging its rows' activations again, its partial sums carried apart; SwiGLU's
// 24 gate columns three half tiles) give the reference's sums in every form; the default width leaves
// one panel a thread at the cases' sizes.
TEST(GemmTable, Avx2PanelsNarrowerThanAThreadsColumns) {
  if (const std::string why = unavailable_here("avx2"); !why.empty()) GTEST_SKIP() << "avx2: " << why;
  KernelConfig k = variant_config("avx2");
  k.thresholds.avx2_panel_cols = 48;
  GemmKernels table(k, nullptr);
  Inputs inputs(testing::test_seed());
  check_nn(inputs, {{Dtype::bf16, Dtype::bf16}}, [&](auto&&... args) { table.nn(args...); });
  check_nn_swiglu(inputs, {{Dtype::f32, Dtype::f32}}, [&](auto&&... args) { table.nn_swiglu(args...); });
  check_nt(inputs, {{Dtype::f32, Dtype::f32}}, [&](auto&&... args) { table.nt(args...); });
  check_nt_swiglu_grad(inputs, {Dtype::bf16}, [&](auto&&... args) { table.nt_swiglu_grad(args...); });
  check_tn(
      inputs, {{Dtype::bf16, Dtype::f32}}, [&](auto&&... args) { table.tn(args...); },
      [&](auto&&... args) { table.tn_pair(args...); });
}

// Where a group's partial sums over a thread's panel would pass the avx2 kernel's 16 MiB and its rows
// outnumber the panel's columns, the rows go in passes that each pack the panel again. One thread (a
// panel of 2048 columns) and 4200 rows: three passes of 2016 rows. Each sum must be bit for bit the one
// the kernel makes 48 rows at a time (a single pass each), which adds the same reduction blocks in the
// same order, and near the float64 reference for a few rows of each pass.
TEST(GemmTable, Avx2RowsInPassesWhereTheyOutnumberAPanelsColumns) {
  if (const std::string why = unavailable_here("avx2"); !why.empty()) GTEST_SKIP() << "avx2: " << why;
  GemmKernels table(variant_config("avx2"), nullptr);
  struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  } one_thread;
  constexpr int64_t R = 4200, Kd = 300, N = 2048, kSlice = 48;  // Kd: two reduction blocks
  const uint64_t seed = testing::test_seed();
  Tensor a(Dtype::bf16, {R, Kd}), w(Dtype::f32, {Kd, N});
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, random_normal(seed, uint64_t(i)));
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, random_normal(seed, uint64_t(a.numel() + i)));
  Tensor passes(Dtype::f32, {R, N}), slices(Dtype::f32, {R, N});
  auto at = [](Tensor& t, int64_t row) {
    return static_cast<std::byte*>(t.raw()) + row * t.dim(1) * dtype_size(t.dtype());
  };
  auto row_of = [](const Tensor& t, int64_t row) {
    return static_cast<const std::byte*>(t.raw()) + row * t.dim(1) * dtype_size(t.dtype());
  };
  // dense: bf16 activations, float32 weights (the shared expert's mix).
  table.dense(passes.raw(), Dtype::f32, a.raw(), Dtype::bf16, w.raw(), Dtype::f32, R, Kd, N);
  for (int64_t r = 0; r < R; r += kSlice)
    table.dense(at(slices, r), Dtype::f32, row_of(a, r), Dtype::bf16, w.raw(), Dtype::f32,
                std::min(kSlice, R - r), Kd, N);
  EXPECT_EQ(std::memcmp(passes.raw(), slices.raw(), passes.bytes()), 0) << "dense";
  for (int64_t r : {int64_t(0), int64_t(2015), int64_t(2016), int64_t(4031), int64_t(4032), R - 1})
    for (int64_t j = 0; j < N; j += 97) {
      double want = 0, scale = 0;
      for (int64_t k = 0; k < Kd; ++k) {
        want += a.get(r * Kd + k) * w.get(k * N + j);
        scale += std::fabs(a.get(r * Kd + k) * w.get(k * N + j));
      }
      ASSERT_NEAR(passes.get(r * N + j), want, 1e-5 * scale) << "row " << r << " column " << j;
    }
  // nn, bf16 throughout, all rows on one expert: the same, rounded once.
  Tensor wb(Dtype::bf16, {1, Kd, N}), out(Dtype::bf16, {R, N}), sliced(Dtype::bf16, {R, N});
  for (int64_t i = 0; i < wb.numel(); ++i) wb.set(i, w.get(i));
  const int64_t one_group[2] = {0, R};
  table.nn(out.raw(), Dtype::bf16, a.raw(), wb.raw(), Dtype::bf16, {one_group, 1}, Kd, N);
  for (int64_t r = 0; r < R; r += kSlice) {
    const int64_t slice[2] = {0, std::min(kSlice, R - r)};
    table.nn(at(sliced, r), Dtype::bf16, row_of(a, r), wb.raw(), Dtype::bf16, {slice, 1}, Kd, N);
  }
  EXPECT_EQ(std::memcmp(out.raw(), sliced.raw(), out.bytes()), 0) << "nn";
}

// The table's rows: the reference last, every form present, no row of a variant that cannot run here.
TEST(GemmTable, RowsRunHereAndEndWithTheReference) {
  const GemmKernels table(variant_config("auto"), nullptr);
  ASSERT_FALSE(table.rows().empty());
  EXPECT_STREQ(table.rows().back().variant->name, "ref");
  for (GemmForm f : kGemmForms) {
    bool found = false;
    for (const GemmRow& r : table.rows()) found |= r.form == f;
    EXPECT_TRUE(found) << name(f);
  }
  for (const GemmRow& r : table.rows()) EXPECT_EQ(r.variant->unavailable(), "") << r.variant->name;
}

#ifdef MOE_HAVE_ONEDNN
// oneDNN's AMX brgemm died with SIGILL on bf16 products off its tiles (the AMX host: transposed B at 16
// threads, then a dense product at 2): the onednn rows refuse those calls where oneDNN runs AMX, so the
// table runs the next row, and take the rest.
TEST(GemmTable, OnednnLeavesBf16OffAmxTilesToTheNextRow) {
  auto call = [](GemmForm form, Dtype dt, int64_t Kd, int64_t N, int parts = 1) {
    GemmCall c;
    c.form = form;
    c.in_dtype = c.b_dtype = c.out_dtype = dt;
    c.rows = 65;
    c.Kd = Kd;
    c.N = N;
    c.parts = parts;
    return c;
  };
  const GemmCall crashed = call(GemmForm::nt, Dtype::bf16, 17, 63);  // 65 x 63 x 17 died
  EXPECT_NE(onednn::amx_odd_size_refusal(crashed, true), "");
  EXPECT_EQ(onednn::amx_odd_size_refusal(crashed, false), "") << "only where oneDNN runs AMX";
  for (GemmForm f :
       {GemmForm::nn, GemmForm::nn_swiglu, GemmForm::nt_swiglu_grad, GemmForm::tn, GemmForm::tn_pair}) {
    EXPECT_NE(onednn::amx_odd_size_refusal(call(f, Dtype::bf16, 1024, 63), true), "") << name(f);
    EXPECT_NE(onednn::amx_odd_size_refusal(call(f, Dtype::bf16, 17, 1024), true), "") << name(f);
    EXPECT_EQ(onednn::amx_odd_size_refusal(call(f, Dtype::bf16, 1024, 2048), true), "") << name(f);
  }
  // Two weight parts are N / 2 wide each: 48 is off the tiles though 96 is on them.
  EXPECT_NE(onednn::amx_odd_size_refusal(call(GemmForm::nt, Dtype::bf16, 64, 96, 2), true), "");
  EXPECT_EQ(onednn::amx_odd_size_refusal(call(GemmForm::nt, Dtype::bf16, 1024, 4096, 2), true), "");
  // float32 (AVX-512 brgemm there) and mixed dtypes (computed in float32) ran at every test size.
  EXPECT_EQ(onednn::amx_odd_size_refusal(call(GemmForm::nt, Dtype::f32, 17, 63), true), "");
  GemmCall mixed = call(GemmForm::dense, Dtype::bf16, 63, 17);
  mixed.in_dtype = Dtype::f32;
  EXPECT_EQ(onednn::amx_odd_size_refusal(mixed, true), "");
  // The dense product that died at 2 threads (k = 63, n = 17), whatever its transposes; one of whole tiles
  // stays.
  GemmCall dense = call(GemmForm::dense, Dtype::bf16, 63, 17);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      dense.trans_a = ta;
      dense.trans_b = tb;
      EXPECT_NE(onednn::amx_odd_size_refusal(dense, true), "") << ta << tb;
    }
  dense.Kd = 64;
  dense.N = 2048;
  EXPECT_EQ(onednn::amx_odd_size_refusal(dense, true), "");
  // The onednn row answers with it on an AMX CPU, and takes the call elsewhere.
  const GemmVariant* v = gemm_variant("onednn");
  ASSERT_NE(v, nullptr);
  const std::string here = v->supports(crashed, GemmThresholds{});
  EXPECT_TRUE(here.empty() || here == onednn::amx_odd_size_refusal(crashed, true)) << here;
}
#endif

TEST(GemmLibrary, ReportsVersion) {
  const std::string v = gemm_library_version();
  std::printf("[ gemm     ] %s\n", v.c_str());
  EXPECT_FALSE(v.empty());
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryGemmVariant, ::testing::ValuesIn(variant_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe
