// One rank's side of a parallel block run, and the comparison of the gathered global results with the
// single-process run and the float64 oracle: shared by the thread-rank tests (test_parallel.cpp) and the
// MPI ones (tests/mpi/test_mpi.cpp).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "moe/backend.h"
#include "moe/block.h"
#include "moe/check.h"
#include "moe/conditioned_check.h"
#include "moe/parallel.h"

namespace moe::parallel_cases {

struct Results {
  Tensor out;                     // global (rank 0; empty elsewhere)
  std::optional<MoeGrads> grads;  // global (rank 0), forward_backward
  CommMeter meter;                // this rank's
  CommPeak peak;                  // this rank's, where run_rank was asked to measure it
};

// Runs cfg's block twice on this rank of `comm` (the second call reuses every buffer) from its
// slices of the inputs and routing, and gathers the global results on rank 0.
inline Results run_rank(Comm& comm, const MoeConfig& cfg, const Routing& routing,
                        const std::string& device = "cpu", bool measure_peak = false) {
  const std::unique_ptr<Backend> rank_backend = make_backend(device);  // each rank's own, as each process's
  Backend& be = *rank_backend;
  MoeBlock block(cfg, be, comm);
  const RankLayout& l = block.layout();
  const MoeConfig rc = rank_config(cfg, l);
  const MoeInputs in = to_memory(make_rank_inputs(cfg, l), be.memory());
  const RoutingTensors rt = to_memory(rank_routing(routing, l), be.memory());
  Tensor out = be.empty(cfg.dtype, {rc.tokens, cfg.hidden});
  std::optional<MoeGrads> grads;
  if (cfg.bench_pass == BenchPass::forward_backward) grads = make_grads(rc, be.memory());
  Status s;
  for (int call = 0; call < 2 && s; ++call)
    s = grads ? block.forward_backward(out, *grads, in, rt) : block.forward(out, in, rt);
  EXPECT_TRUE(s.is_ok()) << s.message();
  Results res;
  res.meter = block.comm_meter();
  if (measure_peak) {
    EXPECT_TRUE(measure_comm_peak(res.meter, res.peak).is_ok());
  }
  std::optional<MoeGrads> host_grads;
  if (grads) host_grads = to_host(*grads);
  MoeGrads global_grads;
  EXPECT_TRUE(
      gather_results(comm, cfg, out.to_host(), host_grads ? &*host_grads : nullptr, res.out, &global_grads)
          .is_ok());
  if (grads) res.grads = global_grads;
  return res;
}

inline double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e30;
  double d = 0, n = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    d += (got.get(i) - want.get(i)) * (got.get(i) - want.get(i));
    n += want.get(i) * want.get(i);
  }
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

inline std::string describe(const MoeConfig& c, int ranks) {
  std::string path = c.parallel_mode == ParallelMode::ep ? std::string(" ") + name(c.ep_comm_path) : "";
  return fmt::format(
      "R={} mesh={}x{} {}{} impl={} backend={} dtype={} pass={} T={} E={} K={} S={} null={} seed={}", ranks,
      c.mesh_data, c.mesh_expert, name(c.parallel_mode), path, name(c.impl), name(c.gemm_backend),
      dtype_name(c.dtype), name(c.bench_pass), c.tokens, c.experts, c.topk, c.shared_expert_dim,
      c.null_routing.frac, c.seed);
}

// cfg on one rank, as the reference of a parallel run.
inline MoeConfig single_process(MoeConfig c) {
  c.parallel_mode = ParallelMode::none;
  c.ep_comm_path = EpCommPath::compact_psum;
  c.mesh_data = c.mesh_expert = 0;
  c.ep_overlap = 1;
  return c;
}

// The global results of a parallel run against the oracle (--check's rule) and against the single-process
// run: float32 to reassociation, bf16 to a few roundings; with int8 GEMMs to --check's int8 floor (a
// reassociated f32 sum, in the loss gradient say, may land a value on the other side of a quantization
// boundary: one element moves a whole step).
inline void expect_same_results(const MoeConfig& cfg, const Routing& routing, const Results& multi,
                                const Results& single) {
  const MoeInputs in = make_inputs(cfg);
  const ConditionedCheck r =
      check_conditioned(cfg, in, routing, multi.out, multi.grads ? &*multi.grads : nullptr);
  EXPECT_TRUE(r.pass) << "worst=" << r.worst.name << " err=" << r.worst.rel_err << " tol=" << r.worst.tol;
  const double float_tol = cfg.dtype == Dtype::f32 ? 2e-6 : 2e-2;
  const double tol = any_int8_gemm(cfg) ? std::max(float_tol, kInt8CheckTolerance) : float_tol;
  EXPECT_LE(rel_err(multi.out, single.out), tol) << "out";
  if (!multi.grads) return;
  const MoeGrads& g = *multi.grads;
  const MoeGrads& s = *single.grads;
  for (auto [label, a, b] : {std::tuple{"dx", &g.dx, &s.dx},
                             {"dw1", &g.dw1, &s.dw1},
                             {"dw3", &g.dw3, &s.dw3},
                             {"dw2", &g.dw2, &s.dw2},
                             {"dsw1", &g.dsw1, &s.dsw1},
                             {"dsw3", &g.dsw3, &s.dsw3},
                             {"dsw2", &g.dsw2, &s.dsw2}})
    if (b->numel() > 0) {
      EXPECT_LE(rel_err(*a, *b), tol) << label;
    }
}

}  // namespace moe::parallel_cases
