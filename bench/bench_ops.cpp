// Micro-benchmarks of the block's stage ops on the cpu backend, next to the GEMMs' (bench_gemm.cpp), so an
// op's speed can be read without a whole block run: pack (routing -> plan), dispatch and combine forward and
// backward, SwiGLU's passes (forward, backward, forward with g's rows quantized) and the int8 quantizations
// (x per token, rows per row, weights per expert). The reference shape: T = 8192 tokens, K = 2, H = M = 1024,
// E = 16, random routing, gmm layout, fused_w13, bf16 storage (float32 where the op's output is). Each
// reports the bytes it reads and writes per second (`bytes_per_second`, the memory roofline's unit; the ops
// are memory-bound) besides the time.
//   moe_microbench --benchmark_filter='Op/'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/backend.h"
#include "cpu/ops/swiglu.h"
#include "moe/backend.h"
#include "moe/inputs.h"
#include "moe/ops.h"
#include "moe/pack.h"
#include "moe/quantize.h"
#include "moe/routing.h"
#include "moe/tensor.h"

namespace moe {
namespace {

// The reference shape's config, routing and plan, made once for every op benchmark.
struct Stage {
  MoeConfig cfg;
  KernelConfig kernel = [] {
    KernelConfig k;
    k.tuning_file = "none";
    return k;
  }();
  cpu::CpuBackend backend{kernel};
  StageTracer tracer;
  Routing routing;
  RoutingTensors routing_tensors;
  DispatchPlan plan;
  int64_t rows = 0;  // the plan's rows (live and padding)

  Stage() {
    cfg.tokens = 8192;
    cfg.hidden = 1024;
    cfg.mlp_dim = 1024;
    cfg.experts = 16;
    cfg.topk = 2;
    cfg.dtype = Dtype::bf16;
    cfg.impl = Impl::fused_w13;
    routing = make_routing(cfg);
    routing_tensors = to_memory(routing, backend.memory());
    plan = allocate_plan(cfg, context().tile_rows, backend.memory());
    backend.make_pack(context())->forward(plan, routing_tensors);
    rows = host_view(plan).rows;
  }
  OpContext context() { return OpContext{cfg, backend, tracer, layout_tile_rows(cfg, kernel.gmm_tile_rows)}; }
  Tensor filled(Dtype dt, std::vector<int64_t> shape) {
    Tensor t(dt, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, double(int64_t(i * 2654435761u % 2001) - 1000) / 4000.0);
    return t;
  }
};
Stage& stage() {
  static Stage s;
  return s;
}

// bytes of memory traffic per iteration.
void report(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(int64_t(double(state.iterations()) * bytes));
}

void BM_Pack(benchmark::State& state) {
  Stage& s = stage();
  auto op = s.backend.make_pack(s.context());
  for (auto _ : state) op->forward(s.plan, s.routing_tensors);
  report(state, double(s.cfg.tokens * s.cfg.topk) * (4 + 4) + double(s.plan.max_rows) * (4 + 4));
}

void BM_DispatchForward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor x = s.filled(Dtype::bf16, {s.cfg.tokens, H});
  Tensor x_rows(Dtype::bf16, {s.plan.max_rows, H});
  auto op = s.backend.make_dispatch(s.context());
  for (auto _ : state) op->forward(x_rows, x, s.plan);
  report(state, double(s.rows * H) * 2 * 2);  // each row read from x and written
}

void BM_DispatchBackward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor dx_rows = s.filled(Dtype::f32, {s.plan.max_rows, H});
  Tensor dx(Dtype::bf16, {s.cfg.tokens, H}), acc(Dtype::f32, {s.cfg.tokens, H});
  auto op = s.backend.make_dispatch(s.context());
  for (auto _ : state) op->backward({dx, acc, false}, dx_rows, s.plan);
  report(state, double(s.rows * H) * 4 + double(s.cfg.tokens * H) * 2);
}

void BM_CombineForward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor y_rows = s.filled(Dtype::bf16, {s.plan.max_rows, H});
  Tensor out(Dtype::bf16, {s.cfg.tokens, H}), acc(Dtype::f32, {s.cfg.tokens, H});
  auto op = s.backend.make_combine(s.context());
  for (auto _ : state) op->forward({out, acc, false}, y_rows, s.plan, s.routing_tensors);
  report(state, double(s.rows * H) * 2 + double(s.cfg.tokens * H) * 2);
}

void BM_CombineBackward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor dy = s.filled(Dtype::f32, {s.cfg.tokens, H});
  Tensor dy_rows(Dtype::bf16, {s.plan.max_rows, H});
  auto op = s.backend.make_combine(s.context());
  for (auto _ : state) op->backward(dy_rows, dy, s.plan, s.routing_tensors);
  report(state, double(s.rows * H) * (4 + 2));
}

// SwiGLU over the plan's rows of h (rows, 2M) = [gate | up].
void BM_SwigluForward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t M = s.cfg.mlp_dim;
  const Tensor h = s.filled(Dtype::bf16, {s.rows, 2 * M});
  Tensor g(Dtype::bf16, {s.rows, M});
  const bf16_t* hp = h.data<bf16_t>();
  for (auto _ : state)
    cpu::swiglu_forward(g.raw(), Dtype::bf16, {hp, hp + M, 2 * M}, Dtype::bf16, s.rows, M, nullptr);
  report(state, double(s.rows * M) * (4 + 2));
}

void BM_SwigluForwardQuantized(benchmark::State& state) {
  Stage& s = stage();
  const int64_t M = s.cfg.mlp_dim;
  const Tensor h = s.filled(Dtype::bf16, {s.rows, 2 * M});
  Tensor g(Dtype::bf16, {s.rows, M});
  std::vector<int8_t> gq(size_t(s.rows * M));
  std::vector<float> scale(static_cast<size_t>(s.rows));
  const bf16_t* hp = h.data<bf16_t>();
  for (auto _ : state)
    cpu::swiglu_forward_quantized(g.raw(), Dtype::bf16, gq.data(), scale.data(), {hp, hp + M, 2 * M},
                                  Dtype::bf16, s.rows, M, nullptr);
  report(state, double(s.rows * M) * (4 + 2 + 1));
}

void BM_SwigluBackward(benchmark::State& state) {
  Stage& s = stage();
  const int64_t M = s.cfg.mlp_dim;
  const Tensor h = s.filled(Dtype::bf16, {s.rows, 2 * M}), dg = s.filled(Dtype::bf16, {s.rows, M});
  Tensor dh(Dtype::bf16, {s.rows, 2 * M});
  const bf16_t* hp = h.data<bf16_t>();
  bf16_t* dhp = dh.data<bf16_t>();
  for (auto _ : state)
    cpu::swiglu_backward({dhp, dhp + M, 2 * M}, Dtype::bf16, dg.raw(), {hp, hp + M, 2 * M}, Dtype::bf16,
                         s.rows, M, nullptr);
  report(state, double(s.rows * M) * (4 + 2 + 4));
}

// x's quantization as the int8 forward does it: per token, gathered to the token's rows.
void BM_QuantizeTokenRows(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor x_rows = s.filled(Dtype::bf16, {s.plan.max_rows, H});
  std::vector<int8_t> q(size_t(s.plan.max_rows * H));
  std::vector<float> scale(static_cast<size_t>(s.plan.max_rows));
  const HostPlan p = host_view(s.plan);
  for (auto _ : state)
    cpu::quantize_token_rows(q.data(), scale.data(), x_rows.raw(), Dtype::bf16, p.tokens, p.topk, H,
                             p.assignment_row);
  report(state, double(s.cfg.tokens * H) * 2 + double(s.rows * H));
}

void BM_QuantizeRows(benchmark::State& state) {
  Stage& s = stage();
  const int64_t H = s.cfg.hidden;
  const Tensor dy_rows = s.filled(Dtype::bf16, {s.rows, H});
  std::vector<int8_t> q(size_t(s.rows * H));
  std::vector<float> scale(static_cast<size_t>(s.rows));
  for (auto _ : state) cpu::quantize_rows(q.data(), scale.data(), dy_rows.raw(), Dtype::bf16, s.rows, H, H);
  report(state, double(s.rows * H) * (2 + 1));
}

// The routed weights per expert, as int8_routed quantizes w13 (E, H, 2M) in every call.
void BM_QuantizeExperts(benchmark::State& state) {
  Stage& s = stage();
  const int64_t E = s.cfg.experts, H = s.cfg.hidden, N = 2 * s.cfg.mlp_dim;
  const Tensor w = s.filled(Dtype::bf16, {E, H, N});
  std::vector<int8_t> q(size_t(E * H * N));
  std::vector<float> scale(static_cast<size_t>(E));
  for (auto _ : state) cpu::quantize_experts(q.data(), scale.data(), w.raw(), Dtype::bf16, E, H, N);
  report(state, double(E * H * N) * (2 + 2 + 1));  // amax pass, quantize pass
}

BENCHMARK(BM_Pack)->Name("Op/pack")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DispatchForward)->Name("Op/dispatch_forward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DispatchBackward)->Name("Op/dispatch_backward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CombineForward)->Name("Op/combine_forward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CombineBackward)->Name("Op/combine_backward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SwigluForward)->Name("Op/swiglu_forward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SwigluForwardQuantized)
    ->Name("Op/swiglu_forward_quantized")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SwigluBackward)->Name("Op/swiglu_backward")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_QuantizeTokenRows)->Name("Op/quantize_token_rows")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_QuantizeRows)->Name("Op/quantize_rows")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_QuantizeExperts)->Name("Op/quantize_experts")->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace moe
