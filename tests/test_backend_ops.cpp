// Every op of every registered backend against the `ref` backend (ggml's test-backend-ops): fresh
// random inputs (seed printed) over the MoE edge grid (T not a multiple of the tile, empty experts,
// all tokens on one expert, K=1, K=E, S=0 and S>0, null routing, capacity drop and pad), each op's
// forward and backward. Inputs are made on the host and copied to the backend; every output the op
// overwrites is poisoned with NaN first, so an element it fails to write fails the comparison.
//
// Tolerances follow the computation, not the storage: an op of a float32 run matches to 1e-5 of
// (|ref| + rms(ref)) per element (f32 accumulation against float64); an op of a bfloat16 run to 2^-7
// of the same, i.e. two bf16 rounding steps at the element's magnitude, because the op and its ref
// round the same intermediates to bf16 and may land one step apart (a float16 run: 2^-10, two float16
// steps); the expert FFN's chain of GEMMs adds, per element, how far its reference moves when its inputs
// move by a step of the run dtype (nudge_slack). Index ops
// (pack, dispatch forward) must match exactly. A backend that cannot run an op for a case says why: the test
// reports SKIPPED with those reasons when nothing ran.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "moe/backend.h"
#include "moe/inputs.h"
#include "moe/null_routing.h"
#include "moe/rng.h"
#include "moe/routing.h"
#include "test_util.h"

namespace moe {
namespace {

struct Case {
  std::string label;
  MoeConfig cfg;
  KernelConfig kernel;
  Routing routing;
};

Routing routing_of(int64_t T, int64_t K, int64_t E, uint64_t seed,
                   const std::function<int32_t(int64_t, int64_t)>& id) {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      ids.push_back(id(t, k));
      weights.push_back(float(0.1 + random_uniform(seed, uint64_t(t * K + k))));
    }
  return routing_from(T, K, E, ids, weights);
}

std::vector<Case> edge_grid(uint64_t seed) {
  struct Shape {
    const char* label;
    int64_t T, E, K, S;
    std::function<void(MoeConfig&)> tweak;
    std::function<int32_t(int64_t, int64_t)> id;  // null: random routing from the config
  };
  const std::vector<Shape> shapes = {
      {"odd T", 37, 5, 2, 0, nullptr, nullptr},
      {"odd T, shared", 37, 5, 2, 12, nullptr, nullptr},
      {"empty experts", 23, 6, 2, 8, nullptr,
       [](int64_t t, int64_t k) { return int32_t((t + k) % 2 ? 4 : 1); }},
      {"all tokens on one expert", 19, 4, 1, 0, nullptr, [](int64_t, int64_t) { return 2; }},
      {"K=1", 17, 5, 1, 6, nullptr, nullptr},
      {"K=E", 11, 3, 3, 0, nullptr, nullptr},
      {"null routing", 37, 5, 2, 0, [](MoeConfig& c) { c.null_routing.frac = 0.4; }, nullptr},
      {"capacity drop", 37, 5, 2, 4,
       [](MoeConfig& c) {
         c.capacity_policy = CapacityPolicy::drop;
         c.capacity_factor = 0.8;
       },
       nullptr},
      {"capacity pad", 29, 4, 2, 0,
       [](MoeConfig& c) {
         c.capacity_policy = CapacityPolicy::pad;
         c.capacity_factor = 1.1;
       },
       nullptr},
  };
  std::vector<Case> cases;
  int variant = 0;
  // A case of shape s in dt; `set` fills the rest of its config (from `variant`) before the routing.
  const auto add = [&](const Shape& s, Dtype dt, Impl impl, const std::string& label, auto&& set) {
    Case c;
    c.cfg.tokens = s.T;
    c.cfg.hidden = 24;
    c.cfg.mlp_dim = 20;
    c.cfg.experts = s.E;
    c.cfg.topk = s.K;
    c.cfg.dtype = dt;
    c.cfg.impl = impl;
    c.cfg.seed = seed + uint64_t(variant);
    set(c.cfg);
    if (s.tweak) s.tweak(c.cfg);
    c.kernel.gmm_tile_rows = 8;
    c.routing = s.id ? routing_of(s.T, s.K, s.E, seed + 7, s.id) : make_routing(c.cfg);
    c.label = fmt::format("{} {} {}", s.label, dtype_name(dt), label);
    cases.push_back(std::move(c));
    ++variant;
  };
  for (const Shape& s : shapes)
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      for (GemmBackend be : {GemmBackend::gmm, GemmBackend::ragged_dot})
        for (Impl impl : {Impl::baseline, Impl::fused_w13_preweight, Impl::fast})
          add(s, dt, impl, fmt::format("{} {}", name(be), name(impl)), [&](MoeConfig& c) {
            c.shared_expert_dim = s.S;
            c.shared_fused = variant % 2 == 0;
            c.gemm_backend = be;
            c.bench_pass = BenchPass::forward_backward;
            c.remat_mode = variant % 3 == 0 ? RematMode::expert_mlp : RematMode::none;
            c.permute_mode = variant % 4 == 1 ? PermuteMode::repeat_sort : PermuteMode::direct_take;
            c.use_custom_sort_vjp = variant % 8 == 1;
            c.matmul_precision =
                variant % 5 == 2 ? MatmulPrecision::highest : MatmulPrecision::default_precision;
          });
  // impl ref_dp (no shared expert, null routing or capacity): its 256-row blocks, the padding and the
  // trailing blocks multiplied, per-block weight gradients summed into each expert's, must leave the
  // rows and gradients the reference computes; plus an expert whose rows fill more than one block and
  // experts with none. Forward_backward, and forward alone once per dtype.
  std::vector<Shape> ref_dp_shapes = shapes;
  ref_dp_shapes.push_back({"an expert over two blocks", 300, 4, 2, 0, nullptr,
                           [](int64_t t, int64_t k) { return int32_t(k ? 3 : t % 7 == 0); }});
  for (const Shape& s : ref_dp_shapes)
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      if (!s.tweak)
        add(s, dt, Impl::ref_dp, "ref_dp", [&](MoeConfig& c) {
          c.bench_pass = &s == &ref_dp_shapes[0] ? BenchPass::forward : BenchPass::forward_backward;
          c.renormalize_topk = dt == Dtype::bf16;
        });
  return cases;
}

Tensor random_host(Dtype dt, std::vector<int64_t> shape, uint64_t key) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, random_normal(key, uint64_t(i)));
  return t;
}

// An output in `be`'s memory whose every element is NaN (floats) or -1 (integers) until written.
Tensor poisoned(Backend& be, Dtype dt, std::vector<int64_t> shape) {
  Tensor host(dt, std::move(shape));
  for (int64_t i = 0; i < host.numel(); ++i) host.set(i, is_float(dt) ? std::nan("") : -1.0);
  return be.to_device(host);
}

double run_tolerance(Dtype run_dtype) {
  switch (run_dtype) {
    case Dtype::f32:
      return 1e-5;
    case Dtype::bf16:
      return 1.0 / 128;
    case Dtype::f16:
      return 1.0 / 1024;  // 10 fraction bits to bf16's 7
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, "no op tolerance for this run dtype");
}

// A float32 sum stored once in dt: half an ulp of bfloat16 is 2^-9 of the value, of float16 2^-12.
double stored_sum_tolerance(Dtype dt) {
  return dt == Dtype::bf16 ? 1.0 / 256 : dt == Dtype::f16 ? 1.0 / 2048 : 1e-6;
}

// The first n elements of `got` (any memory) against `want` (host):
// |g - w| <= tol * (|w| + rms(w)) + kSlackFactor * slack[i] (slack: see nudge_slack).
constexpr double kSlackFactor = 4;
::testing::AssertionResult close(const char* what, const Tensor& got_any, const Tensor& want, int64_t n,
                                 double tol, const std::vector<double>* slack = nullptr) {
  const Tensor got = got_any.to_host();
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += want.get(i) * want.get(i);
  const double rms = n ? std::sqrt(sum_sq / double(n)) : 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got.get(i), w = want.get(i), extra = slack ? kSlackFactor * (*slack)[size_t(i)] : 0;
    if (!(std::fabs(g - w) <= tol * (std::fabs(w) + rms) + extra))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << g << ", ref " << w << " (tol "
                                           << tol << ", rms " << rms << ", slack " << extra << ")";
  }
  return ::testing::AssertionSuccess();
}

// A chain of GEMMs in bfloat16 rounds its intermediates (the expert FFN's h, g, dg, dh) to bf16 in the
// op and in its reference alike, and the two may land one bf16 step apart (float32 against float64
// sums, exp_approx against exp): rarely, but one such step of a large intermediate moves a small
// output by more than a fixed share of its magnitude (3 % of random seeds failed 2^-7 at hidden 24).
// How far one step moves an output is measured, element by element, as the reference's own movement
// when every input moves by up to one bf16 step: the largest of kNudges draws, x * (1 + 2^-7 r) with r
// uniform in [-1, 1], rounded back to bf16 (float16: 2^-10 and float16).
constexpr int kNudges = 3;

Tensor nudged(const Tensor& x, uint64_t key) {
  const double nudge = x.dtype() == Dtype::f16 ? 1.0 / 1024 : 1.0 / 128;
  Tensor t(x.dtype(), x.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, x.get(i) * (1 + nudge * (2 * random_uniform(key, uint64_t(i)) - 1)));
  return t;
}

// slack[i] = max over draws |nudged_i - want_i|, for each output of `reference`, a function of the
// inputs returning host tensors.
template <class Reference>
std::vector<std::vector<double>> nudge_slack(const std::vector<Tensor>& inputs, uint64_t seed,
                                             Reference reference) {
  const std::vector<Tensor> want = reference(inputs);
  std::vector<std::vector<double>> slack;
  for (const Tensor& t : want) slack.emplace_back(size_t(t.numel()), 0.0);
  for (int d = 0; d < kNudges; ++d) {
    std::vector<Tensor> moved;
    for (size_t k = 0; k < inputs.size(); ++k)
      moved.push_back(nudged(inputs[k], seed + 1000 * uint64_t(d) + k));
    const std::vector<Tensor> got = reference(moved);
    for (size_t o = 0; o < want.size(); ++o)
      for (int64_t i = 0; i < want[o].numel(); ++i)
        slack[o][size_t(i)] = std::max(slack[o][size_t(i)], std::fabs(got[o].get(i) - want[o].get(i)));
  }
  return slack;
}

// Token sums are checked 64 wide (an op takes widths from its tensors): bf16 rows of whole cache
// lines, which the CPU gather (and combine's backward) streams out.
constexpr int64_t kSumsWidth = 64;

// The three ways the block asks an op for token sums (TokenSums): in place into the float32
// accumulator that holds the start (the sums are then reduced across ranks), and straight into the
// run dtype from zero or from a start held in the accumulator (one rank). The accumulator is poisoned
// where it holds no start, so an op that reads it there fails. ref_sums(want) and be_sums(got) run
// the reference and the backend op.
template <class RefSums, class BeSums>
void expect_token_sums(const char* what, Backend& ref_be, Backend& be, Dtype run_dtype, int64_t T, int64_t H,
                       uint64_t seed, RefSums ref_sums, BeSums be_sums) {
  struct Mode {
    const char* label;
    bool in_place, start;
  };
  for (const Mode m : {Mode{"f32 in place", true, true}, Mode{"run dtype from zero", false, false},
                       Mode{"run dtype from a start", false, true}}) {
    SCOPED_TRACE(std::string(what) + ", " + m.label);
    const Tensor start = random_host(Dtype::f32, {T, H}, seed);
    Tensor want(Dtype::f64, {T, H});
    Tensor want_acc = m.start ? start.clone() : poisoned(ref_be, Dtype::f32, {T, H});
    ref_sums(TokenSums{want, want_acc, m.start});
    Tensor acc = m.start ? be.to_device(start).clone() : poisoned(be, Dtype::f32, {T, H});
    Tensor separate = poisoned(be, run_dtype, {T, H});
    Tensor& out = m.in_place ? acc : separate;
    be_sums(TokenSums{out, acc, m.start});
    EXPECT_TRUE(close(what, out, want, T * H, stored_sum_tolerance(out.dtype())));
  }
}

class OpsOnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    seed_ = testing::test_seed();
    cases_ = edge_grid(seed_);
  }
  Backend& be() { return testing::test_backend(GetParam()); }
  Backend& ref() { return testing::test_backend("ref"); }

  // True when `be` runs `op` for the case; else records why.
  bool supported(OpKind op, const Case& c) {
    if (Status s = be().supports(op, c.cfg); !s) {
      skipped_.insert(s.message());
      return false;
    }
    ++ran_;
    return true;
  }
  void skip_if_nothing_ran() {
    if (ran_ > 0) return;
    std::string why;
    for (const std::string& s : skipped_) why += (why.empty() ? "" : "; ") + s;
    GTEST_SKIP() << GetParam() << ": " << why;
  }

  OpContext context(const Case& c, Backend& b) {
    return OpContext{c.cfg, b, tracer_, layout_tile_rows(c.cfg, c.kernel.gmm_tile_rows)};
  }
  // The case's plan from the ref backend's pack (host memory).
  DispatchPlan ref_plan(const Case& c) {
    DispatchPlan plan = allocate_plan(c.cfg, context(c, ref()).tile_rows, ref().memory());
    ref().make_pack(context(c, ref()))->forward(plan, to_memory(c.routing, ref().memory()));
    return plan;
  }

  // The dispatch's gather (exact) and its backward's token sums for case c.
  void check_dispatch(const Case& c) {
    SCOPED_TRACE(c.label);
    const int64_t T = c.cfg.tokens, H = c.cfg.hidden;
    const DispatchPlan plan = ref_plan(c), be_plan = to_memory(plan, be().memory());
    const int64_t rows = plan_stats(plan).rows;
    const Tensor x = random_host(c.cfg.dtype, {T, H}, seed_ + 1);
    Tensor want = poisoned(ref(), c.cfg.dtype, {plan.max_rows, H}),
           got = poisoned(be(), c.cfg.dtype, {plan.max_rows, H});
    ref().make_dispatch(context(c, ref()))->forward(want, x, plan);
    auto op = be().make_dispatch(context(c, be()));
    op->forward(got, be().to_device(x), be_plan);
    EXPECT_TRUE(close("x_rows", got, want, rows * H, 0.0));

    const Tensor dx_rows = random_host(Dtype::f32, {plan.max_rows, kSumsWidth}, seed_ + 2);
    const Tensor be_dx_rows = be().to_device(dx_rows);
    expect_token_sums(
        "dx", ref(), be(), c.cfg.dtype, T, kSumsWidth, seed_ + 3,
        [&](const TokenSums& dx) { ref().make_dispatch(context(c, ref()))->backward(dx, dx_rows, plan); },
        [&](const TokenSums& dx) { op->backward(dx, be_dx_rows, be_plan); });
  }

  // The loss's dy and sum of squares for a random y (rows, cols) of dt.
  void check_loss(Dtype dt, int64_t rows, int64_t cols, uint64_t seed) {
    const Tensor y = random_host(dt, {rows, cols}, seed);
    Tensor dy_want(Dtype::f32, {rows, cols}), sum_want(Dtype::f64, {1});
    Tensor dy_got = poisoned(be(), Dtype::f32, {rows, cols}), sum_got = poisoned(be(), Dtype::f64, {1});
    ref().loss_backward(dy_want, sum_want, y, y.numel());
    be().loss_backward(dy_got, sum_got, be().to_device(y), y.numel());
    EXPECT_TRUE(close("dy", dy_got, dy_want, rows * cols, 1e-6));
    EXPECT_TRUE(close("sum_sq", sum_got, sum_want, 1, 1e-12));
  }

  // The expert FFN's forward and backward for case c (bf16 with nudge_slack, see above).
  void check_expert_ffn(const Case& c) {
    SCOPED_TRACE(c.label);
    const int64_t H = c.cfg.hidden, M = c.cfg.mlp_dim, E = c.cfg.experts;
    const double tol = run_tolerance(c.cfg.dtype);
    const DispatchPlan plan = ref_plan(c), be_plan = to_memory(plan, be().memory());
    const int64_t rows = plan_stats(plan).rows;
    // Rows as a dispatch leaves them: padding rows zero.
    Tensor x_rows(c.cfg.dtype, {plan.max_rows, H});
    ref()
        .make_dispatch(context(c, ref()))
        ->forward(x_rows, random_host(c.cfg.dtype, {c.cfg.tokens, H}, seed_ + 4), plan);
    const FfnWeights w{random_host(c.cfg.dtype, {E, H, M}, seed_ + 5),
                       random_host(c.cfg.dtype, {E, H, M}, seed_ + 6),
                       random_host(c.cfg.dtype, {E, M, H}, seed_ + 7), Tensor()};
    const FfnWeights be_w{be().to_device(w.w1), be().to_device(w.w3), be().to_device(w.w2), Tensor()};
    auto ref_op = ref().make_expert_ffn(context(c, ref()));
    auto op = be().make_expert_ffn(context(c, be()));
    const Tensor dy_rows = random_host(c.cfg.dtype, {plan.max_rows, H}, seed_ + 8);
    // A forward run has no backward: its y_rows alone.
    const bool backward = c.cfg.bench_pass == BenchPass::forward_backward;
    // inputs: x_rows, w1, w3, w2, dy_rows -> outputs: y_rows, dx_rows, dw1, dw3, dw2 (host).
    auto reference = [&](const std::vector<Tensor>& in) {
      const FfnWeights rw{in[1], in[2], in[3], Tensor()};
      Tensor y = poisoned(ref(), c.cfg.dtype, {plan.max_rows, H});
      ref_op->forward(y, in[0], rw, plan);
      if (!backward) return std::vector<Tensor>{y};
      Tensor dx = poisoned(ref(), Dtype::f32, {plan.max_rows, H});
      FfnWeightGrads dw{poisoned(ref(), c.cfg.dtype, {E, H, M}), poisoned(ref(), c.cfg.dtype, {E, H, M}),
                        poisoned(ref(), c.cfg.dtype, {E, M, H})};
      ref_op->backward(dx, dw, in[4], in[0], rw, plan);
      return std::vector<Tensor>{y, dx, dw.dw1, dw.dw3, dw.dw2};
    };
    const std::vector<Tensor> inputs{x_rows, w.w1, w.w3, w.w2, dy_rows};
    const std::vector<Tensor> want = reference(inputs);

    Tensor y_got = poisoned(be(), c.cfg.dtype, {plan.max_rows, H});
    const Tensor be_x_rows = be().to_device(x_rows);
    op->forward(y_got, be_x_rows, be_w, be_plan);
    Tensor dx_got = poisoned(be(), Dtype::f32, {plan.max_rows, H});
    FfnWeightGrads dw_got{poisoned(be(), c.cfg.dtype, {E, H, M}), poisoned(be(), c.cfg.dtype, {E, H, M}),
                          poisoned(be(), c.cfg.dtype, {E, M, H})};
    if (backward) op->backward(dx_got, dw_got, be().to_device(dy_rows), be_x_rows, be_w, be_plan);
    const Tensor* got[] = {&y_got, &dx_got, &dw_got.dw1, &dw_got.dw3, &dw_got.dw2};
    const char* names[] = {"y_rows", "dx_rows", "dw1", "dw3", "dw2"};
    const int64_t counts[] = {rows * H, rows * H, E * H * M, E * H * M, E * M * H};
    const bool rounds = c.cfg.dtype == Dtype::bf16 || c.cfg.dtype == Dtype::f16;
    const std::vector<std::vector<double>> slack =
        rounds ? nudge_slack(inputs, seed_ + 20, reference) : std::vector<std::vector<double>>{};
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_TRUE(close(names[o], *got[o], want[o], counts[o], tol, rounds ? &slack[o] : nullptr));
  }

  // ForwardRunsKeepPaddingZerosAcrossLayouts' case c: one dispatch and expert op over layouts A, B, A.
  void check_padding_across_layouts(const Case& c) {
    Case other = c;
    other.cfg.seed += 1000;
    other.routing = make_routing(other.cfg);
    const int64_t H = c.cfg.hidden, M = c.cfg.mlp_dim, E = c.cfg.experts;
    const Dtype dt = c.cfg.dtype;
    const DispatchPlan plans[] = {ref_plan(c), ref_plan(other)};
    const Tensor x = random_host(dt, {c.cfg.tokens, H}, seed_ + 40);
    const FfnWeights w{be().to_device(random_host(dt, {E, H, M}, seed_ + 41)),
                       be().to_device(random_host(dt, {E, H, M}, seed_ + 42)),
                       be().to_device(random_host(dt, {E, M, H}, seed_ + 43)), Tensor()};
    const bool backward = c.cfg.bench_pass == BenchPass::forward_backward;
    auto dispatch = be().make_dispatch(context(c, be()));
    auto op = be().make_expert_ffn(context(c, be()));
    Tensor x_rows = poisoned(be(), dt, {plans[0].max_rows, H}),
           y = poisoned(be(), dt, {plans[0].max_rows, H});
    // y, then with a backward dx_rows and the weight gradients, of `ffn` on rows x_in.
    auto run = [&](ExpertFfnOp& ffn, Tensor& y_out, const Tensor& x_in, const DispatchPlan& plan,
                   const Tensor& dy_rows) {
      ffn.forward(y_out, x_in, w, plan);
      if (!backward) return std::vector<Tensor>{};
      Tensor dx = poisoned(be(), Dtype::f32, {plan.max_rows, H});
      FfnWeightGrads dw{poisoned(be(), dt, {E, H, M}), poisoned(be(), dt, {E, H, M}),
                        poisoned(be(), dt, {E, M, H})};
      ffn.backward(dx, dw, dy_rows, x_in, w, plan);
      return std::vector<Tensor>{dx.to_host(), dw.dw1.to_host(), dw.dw3.to_host(), dw.dw2.to_host()};
    };
    for (int step : {0, 1, 0}) {
      const DispatchPlan& plan = plans[step];
      const DispatchPlan be_plan = to_memory(plan, be().memory());
      const int64_t rows = plan_stats(plan).rows;
      Tensor want_x(dt, {plan.max_rows, H});
      ref().make_dispatch(context(c, ref()))->forward(want_x, x, plan);
      dispatch->forward(x_rows, be().to_device(x), be_plan);
      EXPECT_TRUE(close("x_rows", x_rows, want_x, rows * H, 0.0)) << "step " << step;
      const Tensor dy_rows = be().to_device(random_host(dt, {plan.max_rows, H}, seed_ + 44 + uint64_t(step)));
      const std::vector<Tensor> got = run(*op, y, x_rows, be_plan, dy_rows);
      Tensor fresh = poisoned(be(), dt, {plan.max_rows, H});
      const std::vector<Tensor> want =
          run(*be().make_expert_ffn(context(c, be())), fresh, be().to_device(want_x), be_plan, dy_rows);
      EXPECT_EQ(std::memcmp(y.to_host().raw(), fresh.to_host().raw(), size_t(rows * H) * dtype_size(dt)), 0)
          << "step " << step;
      const int64_t dx_bytes = rows * H * 4;  // float32 rows
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(
            std::memcmp(got[o].raw(), want[o].raw(), size_t(o == 0 ? dx_bytes : int64_t(got[o].bytes()))), 0)
            << "step " << step << ", backward output " << o;
    }
  }

  uint64_t seed_ = 0;
  std::vector<Case> cases_;
  StageTracer tracer_;

 private:
  int ran_ = 0;
  std::set<std::string> skipped_;
};

TEST_P(OpsOnBackend, Pack) {
  for (const Case& c : cases_) {
    if (!supported(OpKind::pack, c)) continue;
    SCOPED_TRACE(c.label);
    DispatchPlan plan = allocate_plan(c.cfg, context(c, be()).tile_rows, be().memory());
    be().make_pack(context(c, be()))->forward(plan, to_memory(c.routing, be().memory()));
    const testing::PlanVectors got = testing::plan_vectors(plan), want = testing::plan_vectors(ref_plan(c));
    EXPECT_EQ(got.group_offset, want.group_offset);
    EXPECT_EQ(got.group_live, want.group_live);
    EXPECT_EQ(got.row_assignment, want.row_assignment);
    EXPECT_EQ(got.row_weight, want.row_weight);
    EXPECT_EQ(got.assignment_row, want.assignment_row);
    EXPECT_EQ(got.live_rows, want.live_rows);
    EXPECT_EQ(got.dropped, want.dropped);
  }
  skip_if_nothing_ran();
}

TEST_P(OpsOnBackend, DispatchForwardAndBackward) {
  for (const Case& c : cases_)
    if (supported(OpKind::dispatch, c)) check_dispatch(c);
  skip_if_nothing_ran();
}

TEST_P(OpsOnBackend, ExpertFfnForwardAndBackward) {
  for (const Case& c : cases_)
    if (supported(OpKind::expert_ffn, c)) check_expert_ffn(c);
  skip_if_nothing_ran();
}

// A forward run's op keeps packings of its weights across calls (gemv's tile order, for bf16 at few rows an
// expert): on the edge grid run as forward, its rows are the reference's, and weights that come anew (after
// the first ones are freed, so they may lie at their address) give bit for bit those of a fresh op.
TEST_P(OpsOnBackend, ExpertFfnForwardTakesNewWeights) {
  for (Case c : cases_) {
    if (c.cfg.impl == Impl::ref_dp) continue;
    c.cfg.bench_pass = BenchPass::forward;
    c.cfg.remat_mode = RematMode::none;
    if (!supported(OpKind::expert_ffn, c)) continue;
    check_expert_ffn(c);
    SCOPED_TRACE(c.label);
    const int64_t H = c.cfg.hidden, M = c.cfg.mlp_dim, E = c.cfg.experts;
    const Dtype dt = c.cfg.dtype;
    const DispatchPlan plan = ref_plan(c), be_plan = to_memory(plan, be().memory());
    Tensor x_rows(dt, {plan.max_rows, H});
    ref()
        .make_dispatch(context(c, ref()))
        ->forward(x_rows, random_host(dt, {c.cfg.tokens, H}, seed_ + 30), plan);
    const Tensor be_x_rows = be().to_device(x_rows);
    auto weights = [&](uint64_t key) {  // host
      return FfnWeights{random_host(dt, {E, H, M}, key), random_host(dt, {E, H, M}, key + 1),
                        random_host(dt, {E, M, H}, key + 2), Tensor()};
    };
    auto on_device = [&](const FfnWeights& w) {
      return FfnWeights{be().to_device(w.w1), be().to_device(w.w3), be().to_device(w.w2), Tensor()};
    };
    auto forward = [&](ExpertFfnOp& op, const FfnWeights& w) {
      Tensor y = poisoned(be(), dt, {plan.max_rows, H});
      op.forward(y, be_x_rows, w, be_plan);
      return y.to_host();
    };
    auto op = be().make_expert_ffn(context(c, be()));
    forward(*op, on_device(weights(seed_ + 31)));
    const FfnWeights second = weights(seed_ + 34);
    const Tensor got = forward(*op, on_device(second));
    const Tensor fresh = forward(*be().make_expert_ffn(context(c, be())), on_device(second));
    EXPECT_EQ(std::memcmp(got.raw(), fresh.raw(), size_t(plan_stats(plan).rows * H) * dtype_size(dt)), 0);
  }
  skip_if_nothing_ran();
}

// A forward run's dispatch and expert op keep their row buffers' padding rows zeros across calls
// (cpu/ops/kept_zero_padding.h) and write only the live rows, as a forward_backward's expert op does without
// remat: over layouts A, B, A into the same x_rows and y_rows, every row (padding too) is the reference
// dispatch's and a fresh op's on a fresh buffer, bit for bit (rows live in one layout and padding in the next
// must be zeroed), and so are the backward's dx_rows and weight gradients.
TEST_P(OpsOnBackend, ForwardRunsKeepPaddingZerosAcrossLayouts) {
  for (const BenchPass pass : {BenchPass::forward, BenchPass::forward_backward})
    for (Case c : cases_) {
      if (c.cfg.impl == Impl::ref_dp) continue;
      c.cfg.bench_pass = pass;
      c.cfg.remat_mode = RematMode::none;
      if (!supported(OpKind::expert_ffn, c) || !supported(OpKind::dispatch, c)) continue;
      SCOPED_TRACE(c.label + (pass == BenchPass::forward ? " forward" : " forward_backward"));
      check_padding_across_layouts(c);
    }
  skip_if_nothing_ran();
}

TEST_P(OpsOnBackend, CombineForwardAndBackward) {
  for (const Case& c : cases_) {
    if (!supported(OpKind::combine, c)) continue;
    SCOPED_TRACE(c.label);
    const int64_t T = c.cfg.tokens, H = c.cfg.hidden;
    const double tol = run_tolerance(c.cfg.dtype);
    const DispatchPlan plan = ref_plan(c), be_plan = to_memory(plan, be().memory());
    const int64_t rows = plan_stats(plan).rows;
    const RoutingTensors routing = to_memory(c.routing, ref().memory()),
                         be_routing = to_memory(c.routing, be().memory());
    const Tensor y_rows = random_host(c.cfg.dtype, {plan.max_rows, kSumsWidth}, seed_ + 9);
    const Tensor be_y_rows = be().to_device(y_rows);
    auto op = be().make_combine(context(c, be()));
    expect_token_sums(
        "out", ref(), be(), c.cfg.dtype, T, kSumsWidth, seed_ + 10,
        [&](const TokenSums& out) {
          ref().make_combine(context(c, ref()))->forward(out, y_rows, plan, routing);
        },
        [&](const TokenSums& out) { op->forward(out, be_y_rows, be_plan, be_routing); });

    // The backward at both widths: 64 has bf16 rows of whole lines (streamed out on the CPU).
    for (const int64_t width : {H, kSumsWidth}) {
      const Tensor dy = random_host(Dtype::f32, {T, width}, seed_ + 11);
      Tensor dy_rows_want = poisoned(ref(), c.cfg.dtype, {plan.max_rows, width}),
             dy_rows_got = poisoned(be(), c.cfg.dtype, {plan.max_rows, width});
      ref().make_combine(context(c, ref()))->backward(dy_rows_want, dy, plan, routing);
      op->backward(dy_rows_got, be().to_device(dy), be_plan, be_routing);
      EXPECT_TRUE(close("dy_rows", dy_rows_got, dy_rows_want, rows * width, tol));
    }
  }
  skip_if_nothing_ran();
}

TEST_P(OpsOnBackend, SharedExpertForwardAndBackward) {
  for (const Case& c : cases_) {
    if (!c.cfg.has_shared() || !supported(OpKind::shared_expert, c)) continue;
    SCOPED_TRACE(c.label);
    const int64_t T = c.cfg.tokens, H = c.cfg.hidden, S = c.cfg.shared_expert_dim;
    const double tol = run_tolerance(c.cfg.dtype);
    const Tensor x = random_host(c.cfg.dtype, {T, H}, seed_ + 12);
    const FfnWeights w{random_host(c.cfg.dtype, {H, S}, seed_ + 13),
                       random_host(c.cfg.dtype, {H, S}, seed_ + 14),
                       random_host(c.cfg.dtype, {S, H}, seed_ + 15), Tensor()};
    const FfnWeights be_w{be().to_device(w.w1), be().to_device(w.w3), be().to_device(w.w2), Tensor()};
    auto ref_op = ref().make_shared_expert(context(c, ref()));
    auto op = be().make_shared_expert(context(c, be()));
    Tensor out_want = poisoned(ref(), Dtype::f32, {T, H}), out_got = poisoned(be(), Dtype::f32, {T, H});
    const Tensor be_x = be().to_device(x);
    ref_op->forward(out_want, x, w);
    op->forward(out_got, be_x, be_w);
    EXPECT_TRUE(close("out", out_got, out_want, T * H, tol));

    const Tensor dy = random_host(Dtype::f32, {T, H}, seed_ + 16);
    Tensor dx_want = poisoned(ref(), Dtype::f32, {T, H}), dx_got = poisoned(be(), Dtype::f32, {T, H});
    FfnWeightGrads dw_want{poisoned(ref(), c.cfg.dtype, {H, S}), poisoned(ref(), c.cfg.dtype, {H, S}),
                           poisoned(ref(), c.cfg.dtype, {S, H})};
    FfnWeightGrads dw_got{poisoned(be(), c.cfg.dtype, {H, S}), poisoned(be(), c.cfg.dtype, {H, S}),
                          poisoned(be(), c.cfg.dtype, {S, H})};
    ref_op->backward(dx_want, dw_want, dy, x, w);
    op->backward(dx_got, dw_got, be().to_device(dy), be_x, be_w);
    EXPECT_TRUE(close("dx", dx_got, dx_want, T * H, tol));
    EXPECT_TRUE(close("dsw1", dw_got.dw1, dw_want.dw1, H * S, tol));
    EXPECT_TRUE(close("dsw3", dw_got.dw3, dw_want.dw3, H * S, tol));
    EXPECT_TRUE(close("dsw2", dw_got.dw2, dw_want.dw2, S * H, tol));
  }
  skip_if_nothing_ran();
}

TEST_P(OpsOnBackend, LossConvertAndDenseGemm) {
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
    Case c;
    c.cfg.dtype = dt;
    c.cfg.bench_pass = BenchPass::forward_backward;
    SCOPED_TRACE(dtype_name(dt));
    const double tol = run_tolerance(dt);
    if (supported(OpKind::loss, c)) check_loss(dt, 13, 7, seed_ + 17);
    if (supported(OpKind::dense_gemm, c)) {
      for (bool trans_b : {false, true}) {
        const Tensor a = random_host(dt, {19, 33}, seed_ + 18);
        const Tensor b = random_host(
            dt, trans_b ? std::vector<int64_t>{21, 33} : std::vector<int64_t>{33, 21}, seed_ + 19);
        Tensor c_want(dt, {19, 21}), c_got = poisoned(be(), dt, {19, 21});
        ref().dense_gemm(c_want, a, b, trans_b);
        be().dense_gemm(c_got, be().to_device(a), be().to_device(b), trans_b);
        EXPECT_TRUE(close(trans_b ? "c (b transposed)" : "c", c_got, c_want, 19 * 21, tol));
      }
    }
    if (!supported(OpKind::convert, c)) continue;
    const Tensor acc = random_host(Dtype::f32, {9, 11}, seed_ + 20);
    Tensor out_want(dt, {9, 11}), out_got = poisoned(be(), dt, {9, 11});
    ref().convert(out_want, acc);
    be().convert(out_got, be().to_device(acc));
    EXPECT_TRUE(close("converted", out_got, out_want, 99, 0.0));
  }
  skip_if_nothing_ran();
}

// Buffers of several MiB, where the CPU writes the dispatch's rows, SwiGLU's backward (dh) and the
// loss's dy with non-temporal stores (from kStreamRowsBytes, 2 MiB): the edge grid's buffers are too
// small to take those paths. Hidden 16 keeps the expert FFN's reference GEMMs cheap while dh is 4 MiB.
TEST_P(OpsOnBackend, LargeBuffersOnTheStreamingPaths) {
  auto large = [&](int64_t T, int64_t H, int64_t M, int64_t E, int64_t K) {
    Case c;
    c.cfg.tokens = T;
    c.cfg.hidden = H;
    c.cfg.mlp_dim = M;
    c.cfg.experts = E;
    c.cfg.topk = K;
    c.cfg.dtype = Dtype::bf16;
    c.cfg.impl = Impl::fused_w13;
    c.cfg.bench_pass = BenchPass::forward_backward;
    c.cfg.seed = seed_;
    c.kernel.gmm_tile_rows = 8;
    c.routing = make_routing(c.cfg);
    c.label = fmt::format("T={} H={} M={} E={} K={} bfloat16", T, H, M, E, K);
    return c;
  };
  const Case rows_of_x = large(2048, 512, 16, 4, 1);  // x_rows 2 MiB and more
  if (supported(OpKind::dispatch, rows_of_x)) check_dispatch(rows_of_x);
  const Case dh = large(1024, 16, 512, 4, 2);  // dh (2048+, 1024) bf16: 4 MiB
  if (supported(OpKind::expert_ffn, dh)) check_expert_ffn(dh);
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
    Case c = rows_of_x;
    c.cfg.dtype = dt;
    if (!supported(OpKind::loss, c)) continue;
    SCOPED_TRACE(std::string("loss ") + dtype_name(dt));
    check_loss(dt, 1024, 520, seed_ + 21);  // dy 2 MiB and a ragged last chunk
  }
  skip_if_nothing_ran();
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsOnBackend,
                         ::testing::ValuesIn(testing::backend_names(/*except=*/"ref")), testing::param_name);

// The ref ops are themselves checked: composed into a block they must agree with the independent
// whole-block reference (test_block.cpp, backend ref), and here a wrong op must be caught: poisoning
// one element of a correct result fails the comparison.
TEST(OpsComparison, APerturbedElementFails) {
  const Tensor want = random_host(Dtype::f32, {5, 7}, 3);
  Tensor got = want.clone();
  EXPECT_TRUE(close("same", got, want, 35, 1e-5));
  got.set(17, got.get(17) * 1.01);
  EXPECT_FALSE(close("perturbed", got, want, 35, 1e-5));
  got.set(17, std::nan(""));
  EXPECT_FALSE(close("unwritten", got, want, 35, 1.0));
}

}  // namespace
}  // namespace moe
