// Each CPU element-wise/permutation kernel against a plain double loop written here: dispatch
// (direct_take, repeat_sort, backward), SwiGLU (fused and split layouts, preweight, backward) and
// combine (scatter, unsort, backward), in f32 and bf16, on fresh random data, with odd sizes,
// padding rows and empty experts. Index kernels match exactly; float kernels within the stated tolerance.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/combine.h"
#include "cpu/dispatch.h"
#include "cpu/swiglu.h"
#include "moe/pack.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "test_util.h"

namespace moe {
namespace {

Tensor random_tensor(Dtype dt, std::vector<int64_t> shape, uint64_t key, double scale = 1.0) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, float(scale * random_normal(key, uint64_t(i))));
  return t;
}

// Tolerance for a value computed in f32 and stored in `dt`, relative to the magnitude `ref`.
double tol(Dtype dt, double ref) {
  return (dt == Dtype::f32 ? 2e-6 : 8e-3) * std::max(1.0, std::fabs(ref));
}

struct Fixture {
  MoeConfig cfg;
  Routing routing;
  Packed packed;
  DispatchPlan plan;
};

// T=13 tokens, K=2, E=5 with expert 3 empty; gmm tile 4 gives padding rows; capacity drop makes more.
Fixture make_fixture(uint64_t seed, Dtype dt, CapacityPolicy cap) {
  Fixture f;
  f.cfg.tokens = 13;
  f.cfg.experts = 5;
  f.cfg.topk = 2;
  f.cfg.dtype = dt;
  f.cfg.capacity_policy = cap;
  f.cfg.capacity_factor = cap == CapacityPolicy::none ? 0 : 0.9;
  std::vector<int32_t> ids;
  std::vector<float> w;
  for (int64_t t = 0; t < 13; ++t) {
    int32_t e0 = int32_t(random_bits(seed, uint64_t(t)) % 4);
    e0 = e0 == 3 ? 4 : e0;
    int32_t e1 = e0 == 0 ? 2 : 0;
    ids.insert(ids.end(), {e0, e1});
    float p = float(random_uniform(seed + 1, uint64_t(t)));
    w.insert(w.end(), {p, 1 - p});
  }
  f.routing = routing_from(13, 2, 5, ids, w);
  pack_assignments(f.packed, f.routing, PackStrategy::argsort);
  build_dispatch_plan(f.plan, f.packed, f.routing, f.cfg, 4);
  return f;
}

TEST(CpuKernels, DispatchGatherAndBackward) {
  const uint64_t seed = testing::test_seed();
  const int64_t H = 19;
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (CapacityPolicy cap : {CapacityPolicy::none, CapacityPolicy::drop, CapacityPolicy::pad}) {
      Fixture f = make_fixture(seed, dt, cap);
      Tensor x = random_tensor(dt, {13, H}, seed + 2);
      Tensor direct(dt, {f.plan.rows, H}), repeat(dt, {f.plan.rows, H}), rep_scratch(dt, {26, H});
      cpu::dispatch_gather_direct(direct.raw(), x.raw(), dt, f.plan, H);
      cpu::dispatch_gather_repeat(repeat.raw(), rep_scratch.raw(), x.raw(), dt, f.plan, H);
      for (int64_t r = 0; r < f.plan.rows; ++r)
        for (int64_t h = 0; h < H; ++h) {
          int32_t t = f.plan.row_token(r);
          float want = t < 0 ? 0.0f : x.get(t * H + h);
          ASSERT_EQ(direct.get(r * H + h), want) << "row " << r;
          ASSERT_EQ(repeat.get(r * H + h), want) << "row " << r;
        }
      Tensor drows = random_tensor(Dtype::f32, {f.plan.rows, H}, seed + 3);
      for (auto kind : {cpu::DispatchBackwardKind::scatter, cpu::DispatchBackwardKind::gather}) {
        std::vector<float> dx(size_t(13 * H), 0.5f);
        cpu::dispatch_backward(dx.data(), drows.raw(), Dtype::f32, f.plan, H, kind);
        for (int64_t t = 0; t < 13; ++t)
          for (int64_t h = 0; h < H; ++h) {
            double want = 0.5;
            for (int64_t r = 0; r < f.plan.rows; ++r)
              if (f.plan.row_token(r) == t) want += drows.get(r * H + h);
            ASSERT_NEAR(dx[size_t(t * H + h)], want, 1e-5);
          }
      }
    }
}

TEST(CpuKernels, SwigluForwardBackward) {
  const uint64_t seed = testing::test_seed();
  const int64_t rows = 11, M = 37;
  auto silu = [](double z) { return z / (1 + std::exp(-z)); };
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (bool fused : {true, false})
      for (bool preweight : {false, true}) {
        Tensor h = random_tensor(dt, {rows, 2 * M}, seed, 3.0);  // fused: [a | b] rows; split: two planes
        const int64_t ld = fused ? 2 * M : M;
        auto* base = static_cast<char*>(h.raw());
        const size_t es = dtype_size(dt);
        cpu::GateUp gu{base, base + size_t(fused ? M : rows * M) * es, ld};
        std::vector<float> w(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) w[size_t(r)] = float(random_uniform(seed + 9, uint64_t(r)));
        const float* wp = preweight ? w.data() : nullptr;
        Tensor g(dt, {rows, M});
        cpu::swiglu_forward(g.raw(), gu, dt, rows, M, wp);
        Tensor dg = random_tensor(dt, {rows, M}, seed + 4);
        Tensor dh(dt, {rows, 2 * M});
        auto* dbase = static_cast<char*>(dh.raw());
        cpu::GateUpGrad dgu{dbase, dbase + size_t(fused ? M : rows * M) * es, ld};
        cpu::swiglu_backward(dgu, dg.raw(), gu, dt, rows, M, wp);
        auto at = [&](const Tensor& t, const void* plane, int64_t r, int64_t m) {
          int64_t off = (static_cast<const char*>(plane) - static_cast<const char*>(t.raw())) / int64_t(es);
          return double(t.get(off + r * ld + m));
        };
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t m = 0; m < M; ++m) {
            double a = at(h, gu.a, r, m), b = at(h, gu.b, r, m), ww = wp ? w[size_t(r)] : 1.0;
            double want = silu(a) * b * ww;
            ASSERT_NEAR(g.get(r * M + m), want, tol(dt, want)) << r << "," << m;
            double s = 1 / (1 + std::exp(-a)), d = dg.get(r * M + m) * ww;
            double da = d * b * s * (1 + a * (1 - s)), db = d * silu(a);
            ASSERT_NEAR(at(dh, dgu.da, r, m), da, tol(dt, da));
            ASSERT_NEAR(at(dh, dgu.db, r, m), db, tol(dt, db));
          }
      }
}

TEST(CpuKernels, CombineScatterUnsortAndBackward) {
  const uint64_t seed = testing::test_seed();
  const int64_t H = 21;
  for (Dtype dt : {Dtype::f32, Dtype::bf16})
    for (CapacityPolicy cap : {CapacityPolicy::none, CapacityPolicy::drop})
      for (bool preweighted : {false, true}) {
        Fixture f = make_fixture(seed, dt, cap);
        Tensor y = random_tensor(dt, {f.plan.rows, H}, seed + 5);
        for (auto kind : {cpu::CombineKind::scatter, cpu::CombineKind::unsort}) {
          std::vector<float> out(size_t(13 * H), 0.25f);
          cpu::combine_forward(out.data(), y.raw(), dt, f.plan, f.routing, H, kind, preweighted);
          for (int64_t t = 0; t < 13; ++t)
            for (int64_t h = 0; h < H; ++h) {
              double want = 0.25;
              for (int64_t k = 0; k < 2; ++k) {
                int32_t r = f.plan.assignment_row[size_t(t * 2 + k)];
                if (r < 0) continue;
                double w = preweighted                         ? 1.0
                           : kind == cpu::CombineKind::scatter ? f.plan.row_weight[size_t(r)]
                                                               : f.routing.weights[size_t(t * 2 + k)];
                want += w * y.get(r * H + h);
              }
              ASSERT_NEAR(out[size_t(t * H + h)], want, 1e-5 * std::max(1.0, std::fabs(want)));
            }
          Tensor dy = random_tensor(Dtype::f32, {13, H}, seed + 6);
          Tensor dys(dt, {f.plan.rows, H});
          cpu::combine_backward(dys.raw(), dt, dy.data<float>(), f.plan, f.routing, H, kind, preweighted);
          for (int64_t r = 0; r < f.plan.rows; ++r) {
            int32_t a = f.plan.row_assignment[size_t(r)];
            for (int64_t h = 0; h < H; ++h) {
              double want = 0;
              if (a >= 0) {
                double w = preweighted                         ? 1.0
                           : kind == cpu::CombineKind::scatter ? f.plan.row_weight[size_t(r)]
                                                               : f.routing.weights[size_t(a)];
                want = w * dy.get((a / 2) * H + h);
              }
              ASSERT_NEAR(dys.get(r * H + h), want, tol(dt, want));
            }
          }
        }
      }
}

}  // namespace
}  // namespace moe
