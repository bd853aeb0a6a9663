// The grouped GEMM tests' inputs, cases and oracle (tests/test_gemm.cpp has the tolerance's
// derivation), shared by the kernel table's suites and the amx kernel's emulated instance
// (tests/test_gemm_amx.cpp): fresh random inputs, odd sizes that are no tile or panel multiple, empty
// experts, padding rows, two weight parts, and the checks of nn and nn_swiglu against the reference.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "ref/gemm.h"

namespace moe::gemm_test {

inline constexpr Dtype kDtypes[] = {Dtype::f32, Dtype::bf16};
inline const GemmThresholds kDefaults;

class Inputs {
 public:
  explicit Inputs(uint64_t seed) : seed_(seed) {}
  Tensor random(Dtype dt, std::vector<int64_t> shape) {
    Tensor t(dt, std::move(shape));
    const uint64_t key = derive_key(seed_, next_++);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, float(random_normal(key, uint64_t(i))));
    return t;
  }

 private:
  uint64_t seed_;
  uint64_t next_ = 0;
};

inline Tensor nan_filled(Dtype dt, std::vector<int64_t> shape) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::numeric_limits<float>::quiet_NaN());
  return t;
}

// |t|, same dtype (exact: only the sign changes).
inline Tensor abs_of(const Tensor& t) {
  Tensor a = t.clone();
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, std::fabs(a.get(i)));
  return a;
}

// The expected output (the reference's float64 sums) and, per element, S = sum |a b| of its terms.
struct Expected {
  std::vector<double> value, scale;
  explicit Expected(int64_t n) : value(size_t(n), 0.0), scale(size_t(n), 0.0) {}
};

// want.value = ref(inputs), want.scale = ref(|inputs|): `ref(out, abs)` runs the reference into a float64
// out of n elements on the inputs or on their absolute values.
template <typename Ref>
Expected reference(int64_t n, Ref&& ref) {
  Expected want(n);
  ref(want.value.data(), false);
  ref(want.scale.data(), true);
  return want;
}

// One rounding of a stored output, twice its half ulp: 2^-9 (bf16), 2^-12 (float16).
inline double stored_rounding(Dtype dt) {
  return dt == Dtype::bf16 ? 4e-3 : dt == Dtype::f16 ? 5e-4 : 0.0;
}

// The spacing of stored values near zero, a rounding's absolute floor: float16's subnormals are 2^-24 apart
// (bf16's and float32's are far below every tolerance here).
inline double stored_floor(Dtype dt) {
  return dt == Dtype::f16 ? 0x1p-24 : 0.0;
}

inline void expect_close(const Tensor& got, const Expected& want) {
  const double rounding = stored_rounding(got.dtype()), floor = stored_floor(got.dtype());
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.value[size_t(i)],
                 tol = 1e-5 * want.scale[size_t(i)] + rounding * std::fabs(w) + floor;
    if (!(std::fabs(double(got.get(i)) - w) <= tol) && ++bad <= 5)
      ADD_FAILURE() << "element " << i << ": got " << got.get(i) << ", want " << w << " (tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << "mismatching elements out of " << got.numel();
}

inline std::string trace(Dtype in, Dtype out) {
  return std::string("in ") + dtype_name(in) + ", out " + dtype_name(out);
}
// ---- grouped forms --------------------------------------------------------------------------------

struct GroupCase {
  const char* name;
  std::vector<int64_t> sizes;  // (E) rows per group
  int64_t Kd, N;
};

// Odd sizes everywhere. The oneDNN build switches kernel or layout at M = 512 rows (f32 gemm:jit, per-call
// packing of plain weights) and M = 4096 (packing transposed weights): 520 and 4100 rows cross those
// thresholds in nn/nt, Kd = 520 does in tn (M = Kd there). In bands of rows (bf16 nn below 1536, nt from 192
// to 4096; f32 below 512) nn and nt split the output columns between threads in slices of 64: "column_slices"
// and "wide_slices" have outputs of 130 and 200 columns, so that two threads get a full and a ragged slice,
// below and above 1024 rows. The dpbf16 variant packs weights in panels of 1024 reduction elements x 256
// columns (nn) or 128 (nt, nn_swiglu): "deep_kd" needs two panels along nn's reduction and "deep_n" along
// nt's in each of its two weight parts (N / 2 = 1031, odd); both have several along the columns (deep_kd: 300
// a thread on two threads), so partial sums carry between panels (in scratch). Outputs of 2 MiB or more go
// out with non-temporal stores in dpbf16: "streamed_output" crosses that in nn and nn_swiglu (rows 4120 bytes
// apart, so some start on a 64-byte line and most do not), "streamed_wgrad" in tn, "streamed_dgrad" in nt's
// float32 output. "rows_4k_apart": tn's dout rows a multiple of 4 KiB apart (unpadded, ld = N = 2048), as the
// reference shape's, and groups of 1 and 2 rows whose weight rows the ymm gemv walks in place 4 and 2 tiles
// at once. dpbf16's tn packs dout on the way in groups of tiles of 512 KiB: "tn_tile_groups" (1030 rows: 66
// KiB a tile) has 2-5 groups per thread, the last ragged, and an odd group. dpbf16's float32 nn_swiglu runs
// only on groups of 384 rows or more ("large_group", "wide_slices", "streamed_output"; "column_slices" is
// below): "deep_kd_large_group" has two panels along its reduction there. The gemv variant takes groups of at
// most 64 rows, 128 on kept weights on ymm ("rows_past_64": 128 as 21 blocks and 2 rows, 97 as 15 and 5 + 2
// in a chunk, 70 as 11 and 4, a 2-row group beside; other kernels run them elsewhere), 12 (zmm) or 6 (ymm,
// the AVX2-held pass) to a register block of 32 or 16 columns (the last two sharing their rows where the last
// would starve the pipes: zmm 16 rows as 8 + 8, ymm 7 as 5 + 2 and 9 as 5 + 4, in "one_small_group",
// "few_rows" and "adjacent_chunks"), walking the reduction in blocks of 8 (groups of 1-4 rows), 16 (5-8) or
// 32 weight rows (9-32), in items of a weight part's whole rows, split in column chunks where the items are
// too few for two a thread: "few_rows" has groups of each depth, a second register block (16 rows), an odd
// reduction over several blocks (the block after next prefetched, then a short one), a ragged tile (301
// columns a part, two parts) and an empty expert; "one_small_group" one live expert whose 333 columns are
// split in chunks (the last ragged); "wide_kd" a group of 30 rows (three or five register blocks);
// "all_rows_in_one_group" 37 rows (zmm 12 + 12 + 7 + 6) and "odd_sizes_with_empty" 63 (zmm 12 x 4 + 8 + 7),
// both with two next chunks prefetched a share a block; "adjacent_chunks" groups of 5 live rows and more side
// by side, walked in chunks over the whole reduction, so a thread's next chunk is another expert's (its rows
// staged afresh, its weights the ones prefetched); "one_or_two_rows_wide" groups of 1 and 2 rows whose packed
// chunks of whole tiles the ymm layer walks 4 and 2 at a time, over an odd reduction.
inline const GroupCase kGroupCases[] = {
    {"odd_sizes_with_empty", {3, 0, 17, 1, 63, 65}, 17, 63},
    {"all_rows_in_one_group", {0, 0, 37, 0}, 65, 3},
    {"groups_of_one_row", {1, 1, 1, 1, 1}, 63, 17},
    {"one_or_two_rows_wide", {1, 2, 0, 1}, 41, 200},  // whole tiles walked side by side (gemv ymm)
    {"zero_rows", {0, 0, 0}, 17, 65},
    {"one_expert_kd_1", {65}, 1, 63},
    {"large_group", {520, 7}, 65, 33},
    {"huge_group", {4100}, 9, 17},
    {"wide_kd", {5, 0, 30}, 520, 7},
    {"column_slices", {300, 0, 290, 3}, 200, 130},
    {"wide_slices", {1100, 5}, 130, 40},
    {"deep_kd", {5, 2}, 1030, 600},
    {"deep_n", {5, 2}, 200, 2062},
    {"streamed_output", {520, 37}, 24, 2060},
    {"streamed_wgrad", {9, 4}, 740, 740},
    {"streamed_dgrad", {550, 3}, 1000, 24},
    {"rows_4k_apart", {7, 3, 1, 0, 2}, 40, 2048},
    {"tn_tile_groups", {1030, 3}, 24, 1000},
    {"deep_kd_large_group", {800, 3}, 1030, 40},
    {"few_rows", {16, 1, 0, 9, 3, 8}, 131, 602},
    {"one_small_group", {0, 7, 0}, 45, 333},
    {"adjacent_chunks", {9, 12, 8, 15}, 77, 200},
    {"rows_past_64", {128, 0, 97, 70, 2}, 45, 70},
};

// with_padding: each group's last third of rows (rounded down) is layout padding, which nn and nt
// must write as zeros without reading and tn must leave out of its sums (its inputs there are random,
// so reading them shows).
struct Groups {
  std::vector<int64_t> offset;  // (E+1)
  std::vector<int64_t> live;    // (E)
  bool padded;
  Groups(const std::vector<int64_t>& sizes, bool with_padding) : offset{0}, padded(with_padding) {
    for (int64_t s : sizes) {
      offset.push_back(offset.back() + s);
      live.push_back(with_padding ? s - s / 3 : s);
    }
  }
  int64_t experts() const { return int64_t(offset.size()) - 1; }
  int64_t rows() const { return offset.back(); }
  int64_t live_end(int64_t e) const { return offset[size_t(e)] + live[size_t(e)]; }
  GroupedShape shape() const { return {offset.data(), experts(), padded ? live.data() : nullptr}; }
};

// Weights as one (E, Kd, N) tensor, and (padded cases) as two (E, Kd, N) parts read as their column
// concatenation (E, Kd, 2N): a fused impl's [w1 | w3] without a w13.
struct Weights {
  std::vector<Tensor> parts;
  int64_t part_cols;
  ExpertWeights view() const {
    return parts.size() == 1 ? ExpertWeights(parts[0].raw()) : ExpertWeights(parts[0].raw(), parts[1].raw());
  }
  int64_t cols() const { return part_cols * int64_t(parts.size()); }
  Weights abs() const {
    Weights a{{}, part_cols};
    for (const Tensor& p : parts) a.parts.push_back(abs_of(p));
    return a;
  }
};

inline Weights random_weights(Inputs& inputs, Dtype dt, int parts, int64_t E, int64_t Kd, int64_t part_cols) {
  Weights w{{}, part_cols};
  for (int p = 0; p < parts; ++p) w.parts.push_back(inputs.random(dt, {E, Kd, part_cols}));  // (E, Kd, N)
  return w;
}

// The nn product lhs (rows, Kd) @ rhs[e] (Kd, N) on each group's live rows; padding rows zero.
inline Expected nn_reference(const Groups& g, const Tensor& lhs, const Weights& rhs, int64_t Kd) {
  const Tensor lhs_abs = abs_of(lhs);
  const Weights rhs_abs = rhs.abs();
  return reference(g.rows() * rhs.cols(), [&](double* out, bool abs) {
    ref_gemm::grouped_gemm_nn(kDefaults, out, Dtype::f64, (abs ? lhs_abs : lhs).raw(),
                              (abs ? rhs_abs : rhs).view(), lhs.dtype(), g.shape(), Kd, rhs.cols());
  });
}

// (input dtype, output dtype) pairs a check runs.
using DtypePairs = std::vector<std::pair<Dtype, Dtype>>;

// nn on every case, unpadded with one weight tensor and padded with two parts: nn(out, out_dtype, lhs,
// rhs, in_dtype, groups, Kd, N) runs the kernel under test.
template <typename Nn>
void check_nn(Inputs& inputs, const DtypePairs& dtypes, Nn&& nn) {
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      const Groups g(c.sizes, padded);
      for (const auto& [in, out_dt] : dtypes) {
        const Weights rhs = random_weights(inputs, in, padded ? 2 : 1, g.experts(), c.Kd, c.N);
        const int64_t N = rhs.cols();
        SCOPED_TRACE(std::string(c.name) + (padded ? " padded, two weight parts" : "") + ", " +
                     trace(in, out_dt));
        const Tensor lhs = inputs.random(in, {g.rows(), c.Kd});  // (rows, Kd)
        Tensor out = nan_filled(out_dt, {g.rows(), N});          // (rows, N)
        nn(out.raw(), out_dt, lhs.raw(), rhs.view(), in, g.shape(), c.Kd, N);
        expect_close(out, nn_reference(g, lhs, rhs, c.Kd));
      }
    }
}

// The fused up projection + SwiGLU: h against the plain sums, g against SwiGLU applied (in double) to
// the h the call stored, since g is defined from h's rounded values. Padded cases read [w1 | w3] as two
// parts and scale g by routing weights; keep_h = false must give the same g bit for bit.
// nn_swiglu(h, g, out_dtype, lhs, rhs, in_dtype, groups, Kd, M, row_weight, keep_h) runs the kernel.
template <typename NnSwiglu>
void check_nn_swiglu(Inputs& inputs, const DtypePairs& dtypes, NnSwiglu&& nn_swiglu) {
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      const Groups g(c.sizes, padded);
      for (const auto& [in, dt] : dtypes) {
        const int64_t M = c.N;
        const Weights rhs = padded ? random_weights(inputs, in, 2, g.experts(), c.Kd, M)
                                   : random_weights(inputs, in, 1, g.experts(), c.Kd, 2 * M);
        SCOPED_TRACE(std::string(c.name) + (padded ? " padded, two weight parts, routing weights" : "") +
                     ", " + trace(in, dt));
        const Tensor lhs = inputs.random(in, {g.rows(), c.Kd});       // (rows, Kd)
        const Tensor weight = inputs.random(Dtype::f32, {g.rows()});  // (rows)
        const float* row_weight = padded ? static_cast<const float*>(weight.raw()) : nullptr;
        Tensor h = nan_filled(dt, {g.rows(), 2 * M}),
               out = nan_filled(dt, {g.rows(), M});  // (rows, 2M), (rows, M)
        nn_swiglu(h.raw(), out.raw(), dt, lhs.raw(), rhs.view(), in, g.shape(), c.Kd, M, row_weight,
                  /*keep_h=*/true);
        Expected want_g(out.numel());
        for (int64_t e = 0; e < g.experts(); ++e)
          for (int64_t r = g.offset[size_t(e)]; r < g.live_end(e); ++r) {
            for (int64_t j = 0; j < M; ++j) {
              const double a = h.get(r * 2 * M + j), b = h.get(r * 2 * M + M + j),
                           w = row_weight ? row_weight[r] : 1.0;
              want_g.value[size_t(r * M + j)] = a / (1.0 + std::exp(-a)) * b * w;
              // The kernels' sigmoid is an approximation: absolute error ~1e-7, which is large against a
              // tiny silu(a) at very negative a; allow 1e-5 |a b w| on top of the rounding of g.
              want_g.scale[size_t(r * M + j)] =
                  std::fabs(a / (1.0 + std::exp(-a)) * b * w) + std::fabs(a * b * w);
            }
          }
        expect_close(h, nn_reference(g, lhs, rhs, c.Kd));
        expect_close(out, want_g);
        Tensor again = nan_filled(dt, {g.rows(), M});
        nn_swiglu(h.raw(), again.raw(), dt, lhs.raw(), rhs.view(), in, g.shape(), c.Kd, M, row_weight,
                  /*keep_h=*/false);
        EXPECT_EQ(std::memcmp(again.raw(), out.raw(), size_t(out.numel()) * dtype_size(dt)), 0)
            << "keep_h = false changed g";
      }
    }
}

// Kept weights (ExpertWeights::packs: a forward run's) give the bits of the same weights without packs: on
// the call that packs them and on later calls that read the packing (other rows each time), nn into float32
// and bfloat16 and nn_swiglu (h and g), on 1, 2, 3 and 7 threads, one weight tensor and two parts. nn(out,
// out_dtype, lhs, rhs, groups, Kd, N) and nn_swiglu(h, g, lhs, rhs, groups, Kd, M) run the kernel on bf16
// (nn_swiglu: bf16 out, h kept) and return what ran: a pair of calls that ran different kernels (kept weights
// take some variants further than in place) is not compared.
template <typename Nn, typename NnSwiglu>
void check_kept_weights_give_the_bits(Inputs& inputs, Nn&& nn, NnSwiglu&& nn_swiglu) {
  const int threads_before = omp_get_max_threads();
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (padded ? " padded, two weight parts" : ""));
      const Groups g(c.sizes, padded);
      const Weights rhs = random_weights(inputs, Dtype::bf16, padded ? 2 : 1, g.experts(), c.Kd, c.N);
      const int64_t N = rhs.cols();
      WeightPacks packs, swiglu_packs;
      for (int threads : {1, 2, 3, 7}) {
        omp_set_num_threads(threads);
        const Tensor lhs = inputs.random(Dtype::bf16, {g.rows(), c.Kd});  // (rows, Kd)
        // float32 too: a sum's last bits rarely survive rounding to bfloat16.
        for (Dtype out_dt : {Dtype::f32, Dtype::bf16}) {
          Tensor plain = nan_filled(out_dt, {g.rows(), N}), kept = plain.to(out_dt);  // (rows, N)
          const std::string plain_ran = nn(plain.raw(), out_dt, lhs.raw(), rhs.view(), g.shape(), c.Kd, N);
          if (nn(kept.raw(), out_dt, lhs.raw(), rhs.view().kept(&packs), g.shape(), c.Kd, N) != plain_ran)
            continue;
          EXPECT_EQ(std::memcmp(plain.raw(), kept.raw(), kept.bytes()), 0)
              << "nn into " << dtype_name(out_dt) << ", " << threads << " threads";
        }
        if (N % 2 != 0) continue;                                                       // no SwiGLU halves
        Tensor h = nan_filled(Dtype::bf16, {g.rows(), N}), h_kept = h.to(Dtype::bf16);  // (rows, 2M)
        Tensor out = nan_filled(Dtype::bf16, {g.rows(), N / 2}), out_kept = out.to(Dtype::bf16);  // (rows, M)
        const std::string plain_ran =
            nn_swiglu(h.raw(), out.raw(), lhs.raw(), rhs.view(), g.shape(), c.Kd, N / 2);
        if (nn_swiglu(h_kept.raw(), out_kept.raw(), lhs.raw(), rhs.view().kept(&swiglu_packs), g.shape(),
                      c.Kd, N / 2) != plain_ran)
          continue;
        EXPECT_EQ(std::memcmp(h.raw(), h_kept.raw(), h.bytes()), 0)
            << "nn_swiglu's h, " << threads << " threads";
        EXPECT_EQ(std::memcmp(out.raw(), out_kept.raw(), out.bytes()), 0)
            << "nn_swiglu's g, " << threads << " threads";
      }
    }
  omp_set_num_threads(threads_before);
}

// Padded cases with a float32 out read the weights as two parts (dh @ [w1 | w3]^T) and accumulate
// into out (out += product on live rows, as the non-fused impls sum dgate @ w1^T and dup @ w3^T).
// nt(out, out_dtype, dout, rhs, in_dtype, groups, Kd, N, accumulate) runs the kernel under test.
template <typename Nt>
void check_nt(Inputs& inputs, const DtypePairs& dtypes, Nt&& nt) {
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      const Groups g(c.sizes, padded);
      for (const auto& [in, out_dt] : dtypes) {
        const bool accumulate = padded && out_dt == Dtype::f32;
        const Weights rhs = random_weights(inputs, in, accumulate ? 2 : 1, g.experts(), c.Kd, c.N);
        const Weights rhs_abs = rhs.abs();
        const int64_t N = rhs.cols();
        SCOPED_TRACE(std::string(c.name) + (padded ? " padded" : "") +
                     (accumulate ? ", two weight parts, accumulate" : "") + ", " + trace(in, out_dt));
        const Tensor dout = inputs.random(in, {g.rows(), N});  // (rows, N)
        const Tensor dout_abs = abs_of(dout);
        Tensor out = accumulate ? inputs.random(out_dt, {g.rows(), c.Kd})
                                : nan_filled(out_dt, {g.rows(), c.Kd});  // (rows, Kd)
        const Expected want = reference(out.numel(), [&](double* o, bool abs) {
          for (int64_t i = 0; i < out.numel(); ++i)
            o[i] = accumulate ? (abs ? std::fabs(out.get(i)) : out.get(i)) : 0;
          ref_gemm::grouped_gemm_nt(kDefaults, o, Dtype::f64, (abs ? dout_abs : dout).raw(),
                                    (abs ? rhs_abs : rhs).view(), in, g.shape(), c.Kd, N, accumulate);
        });
        nt(out.raw(), out_dt, dout.raw(), rhs.view(), in, g.shape(), c.Kd, N, accumulate);
        expect_close(out, want);
      }
    }
}

// The down projection's dgrad with SwiGLU's backward: dg = dout @ w2[e]^T (M = the case's Kd output
// columns, reduction N), then dgate = dg w up silu'(gate) and dup = dg w silu(gate) from random h, with
// routing weights in padded cases (whose padding rows of h are random: dh's must still be zeros).
// The reference takes dg unrounded: a bf16 kernel rounds dg once (as a stored dg is) and dh once, two
// half-ulps where expect_close allows one (4e-3 |want|), so the scale adds another 4e-3 |want| / 1e-5;
// the sigmoid approximation's ~1e-7 goes in the scale too.
// nt_swiglu_grad(dh, dg, dout, rhs, h, dtype, groups, M, N, row_weight) runs the kernel under test.
template <typename NtSwigluGrad>
void check_nt_swiglu_grad(Inputs& inputs, const std::vector<Dtype>& dtypes, NtSwigluGrad&& nt_swiglu_grad) {
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      const Groups g(c.sizes, padded);
      for (Dtype dt : dtypes) {
        const int64_t M = c.Kd, N = c.N;
        const Weights rhs = random_weights(inputs, dt, 1, g.experts(), M, N);  // (E, M, N)
        const Weights rhs_abs = rhs.abs();
        SCOPED_TRACE(std::string(c.name) + (padded ? " padded, routing weights" : "") + ", " + trace(dt, dt));
        const Tensor dout = inputs.random(dt, {g.rows(), N});  // (rows, N)
        const Tensor dout_abs = abs_of(dout);
        const Tensor h = inputs.random(dt, {g.rows(), 2 * M});        // (rows, 2M) [gate | up]
        const Tensor weight = inputs.random(Dtype::f32, {g.rows()});  // (rows)
        const float* row_weight = padded ? static_cast<const float*>(weight.raw()) : nullptr;
        Tensor dh = nan_filled(dt, {g.rows(), 2 * M}), dg = nan_filled(dt, {g.rows(), M});
        nt_swiglu_grad(dh.raw(), dg.raw(), dout.raw(), rhs.view(), h.raw(), dt, g.shape(), M, N, row_weight);
        // dg = dout @ w2^T unrounded, and its scale.
        const Expected dg_want = reference(g.rows() * M, [&](double* o, bool abs) {
          ref_gemm::grouped_gemm_nt(kDefaults, o, Dtype::f64, (abs ? dout_abs : dout).raw(),
                                    (abs ? rhs_abs : rhs).view(), dt, g.shape(), M, N, false);
        });
        Expected want(dh.numel());
        for (int64_t e = 0; e < g.experts(); ++e)
          for (int64_t r = g.offset[size_t(e)]; r < g.live_end(e); ++r)
            for (int64_t k = 0; k < M; ++k) {
              const double d = dg_want.value[size_t(r * M + k)], d_scale = dg_want.scale[size_t(r * M + k)];
              const double a = h.get(r * 2 * M + k), b = h.get(r * 2 * M + M + k),
                           wr = row_weight ? row_weight[r] : 1.0, s = 1.0 / (1.0 + std::exp(-a));
              const double dgate = wr * b * s * (1.0 + a * (1.0 - s)), dup = wr * a * s;
              const int64_t i_gate = r * 2 * M + k, i_up = i_gate + M;
              want.value[size_t(i_gate)] = d * dgate;
              want.value[size_t(i_up)] = d * dup;
              want.scale[size_t(i_gate)] =
                  d_scale * std::fabs(dgate) + std::fabs(d * wr) * (std::fabs(a * b) + 1);
              want.scale[size_t(i_up)] = d_scale * std::fabs(dup) + std::fabs(d * wr) * (std::fabs(a) + 1);
              for (auto [i, factor] : {std::pair{i_gate, dgate}, std::pair{i_up, dup}})  // dg's rounding
                want.scale[size_t(i)] += (stored_rounding(dt) * std::fabs(want.value[size_t(i)]) +
                                          stored_floor(dt) * std::fabs(factor)) /
                                         1e-5;
            }
        expect_close(dh, want);
      }
    }
}

// Padded cases also read dout as a column slice of a wider buffer (ld_dout = N + 5): the columns past N
// hold random values that must not reach the result. tn_pair must equal two tn calls.
// tn(drhs, out_dtype, lhs, dout, in_dtype, groups, Kd, N, ld_dout) and tn_pair(...) run the kernels
// under test.
template <typename Tn, typename TnPair>
void check_tn(Inputs& inputs, const DtypePairs& dtypes, Tn&& tn, TnPair&& tn_pair) {
  for (const GroupCase& c : kGroupCases)
    for (bool padded : {false, true}) {
      const Groups g(c.sizes, padded);
      for (const auto& [in, out_dt] : dtypes) {
        SCOPED_TRACE(std::string(c.name) + (padded ? " padded" : "") + ", " + trace(in, out_dt));
        const Tensor lhs = inputs.random(in, {g.rows(), c.Kd});  // (rows, Kd)
        const int64_t ld = padded ? c.N + 5 : c.N;
        const Tensor dout = inputs.random(in, {g.rows(), ld});  // (rows, N) of (rows, ld)
        const Tensor lhs_abs = abs_of(lhs), dout_abs = abs_of(dout);
        Tensor drhs = nan_filled(out_dt, {g.experts(), c.Kd, c.N});  // (E, Kd, N)
        tn(drhs.raw(), out_dt, lhs.raw(), dout.raw(), in, g.shape(), c.Kd, c.N, ld);
        const Expected want = reference(drhs.numel(), [&](double* o, bool abs) {  // empty experts: zeros
          ref_gemm::grouped_gemm_tn(kDefaults, o, Dtype::f64, (abs ? lhs_abs : lhs).raw(),
                                    (abs ? dout_abs : dout).raw(), in, g.shape(), c.Kd, c.N, ld);
        });
        expect_close(drhs, want);
        // The pair (dw1 and dw3 from one lhs) is two tn calls, bit for bit.
        const Tensor dout2 = inputs.random(in, {g.rows(), ld});
        Tensor second = nan_filled(out_dt, {g.experts(), c.Kd, c.N}),
               pair_first = nan_filled(out_dt, {g.experts(), c.Kd, c.N}),
               pair_second = nan_filled(out_dt, {g.experts(), c.Kd, c.N});
        tn(second.raw(), out_dt, lhs.raw(), dout2.raw(), in, g.shape(), c.Kd, c.N, ld);
        tn_pair(pair_first.raw(), pair_second.raw(), out_dt, lhs.raw(), dout.raw(), dout2.raw(), in,
                g.shape(), c.Kd, c.N, ld);
        EXPECT_EQ(std::memcmp(pair_first.raw(), drhs.raw(), drhs.bytes()), 0) << "tn_pair's first";
        EXPECT_EQ(std::memcmp(pair_second.raw(), second.raw(), second.bytes()), 0) << "tn_pair's second";
        if (!padded) continue;
        // With zeros in the padding rows the caller may say so, and the form may sum over some of them.
        Tensor lhs0 = lhs.clone(), dout0 = dout.clone();
        for (int64_t e = 0; e < g.experts(); ++e)
          for (int64_t r = g.live_end(e); r < g.offset[size_t(e) + 1]; ++r) {
            for (int64_t k = 0; k < c.Kd; ++k) lhs0.set(r * c.Kd + k, 0.0);
            for (int64_t j = 0; j < ld; ++j) dout0.set(r * ld + j, 0.0);
          }
        GroupedShape zero_padded = g.shape();
        zero_padded.zero_padding = true;
        Tensor drhs0 = nan_filled(out_dt, {g.experts(), c.Kd, c.N});
        tn(drhs0.raw(), out_dt, lhs0.raw(), dout0.raw(), in, zero_padded, c.Kd, c.N, ld);
        expect_close(drhs0, want);
      }
    }
}

}  // namespace moe::gemm_test
