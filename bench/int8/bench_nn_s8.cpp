// The int8 GEMM (nn_s8, cpu/gemm/gemm.h) against the float nn a bf16 run uses, at the reference shape (issue
// 23's: T = 8192 tokens, K = 2, E = 16 experts of ~1024 rows, H = M = 1024: the up projection, Kd = 1024,
// N = 2M = 2048, and the down projection, Kd = 1024, N = 1024) and at the seed's layer (H = 2048, M = 1408,
// E = 60, here with T = 8192 and K = 2: ~273 rows an expert; up Kd = 2048, N = 2816, down Kd = 1408,
// N = 2048). Groups are the mean +- 5 % rows (a fixed seed, exact rows: no padding). Every candidate runs in
// the same process, interleaved round by round, and the best of the rounds is kept (the 2-core box is
// shared: contention only ever slows a call down). Prints, per GEMM, milliseconds, useful GOP/s
// (2 * rows * Kd * N) and the ratio to the bf16 nn (on AVX2 oneDNN computes bf16 in float32); each int8
// variant also with its weights' packing kept across calls ("packed once", int8_routed_prequant's case). At
// each up projection, also the int8 forward's up with SwiGLU (bench_swiglu).
// Plain C++ (no Google Benchmark): the build always has it.
//
//   moe_bench_nn_s8 [rounds=7] [shapes=all|reference|seed]   MOE_GEMM_VARIANT=<name> for the float nn
//                                                             (default auto)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_rounds.h"
#include "cpu/backend.h"
#include "cpu/gemm/gemm.h"
#include "cpu/ops/swiglu.h"
#include "moe/rng.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {
namespace {

constexpr int64_t kRows = 16384;  // T = 8192 tokens x K = 2
constexpr uint64_t kSeed = 20261127;

struct GemmShape {
  const char* layer;  // "reference" or "seed"
  int64_t experts, Kd, N;
  bool up;  // the up projection (N = 2M): also timed with SwiGLU
};
constexpr GemmShape kShapes[] = {{"reference", 16, 1024, 2048, true},
                                 {"reference", 16, 1024, 1024, false},
                                 {"seed", 60, 2048, 2816, true},
                                 {"seed", 60, 1408, 2048, false}};

// (E+1) offsets of groups of the mean +- 5 % rows summing to kRows.
std::vector<int64_t> group_offsets(int64_t experts) {
  std::vector<int64_t> off{0};
  int64_t sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const double jitter = (random_uniform(kSeed, uint64_t(e)) - 0.5) * 0.1;
    const int64_t n = e + 1 == experts
                          ? kRows - sum
                          : kRows / experts + int64_t(std::lround(jitter * double(kRows / experts)));
    sum += n;
    off.push_back(sum);
  }
  return off;
}

Buffer<std::byte> filled(Dtype dt, int64_t n, uint64_t key) {
  Buffer<std::byte> buf(size_t(n) * dtype_size(dt));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = random_bits(key, uint64_t(i));
    switch (dt) {
      case Dtype::s8:
        reinterpret_cast<int8_t*>(buf.data())[i] = int8_t(int64_t(bits % 255) - 127);
        break;
      case Dtype::f32:
        reinterpret_cast<float*>(buf.data())[i] = float(int64_t(bits % 2001) - 1000) / 4000.0f;
        break;
      default:
        reinterpret_cast<bf16_t*>(buf.data())[i] = f32_to_bf16(float(int64_t(bits % 2001) - 1000) / 4000.0f);
        break;
    }
  }
  return buf;
}

using bench_rounds::Candidate;
using bench_rounds::table;

void bench_shape(const GemmShape& shape, int rounds) {
  const int64_t E = shape.experts, Kd = shape.Kd, N = shape.N;
  const std::vector<int64_t> off = group_offsets(E);
  const GroupedShape groups{off.data(), E};
  const char* float_variant = std::getenv("MOE_GEMM_VARIANT") ? std::getenv("MOE_GEMM_VARIANT") : "auto";
  Buffer<std::byte> x16 = filled(Dtype::bf16, kRows * Kd, 1), w16 = filled(Dtype::bf16, E * Kd * N, 2);
  Buffer<std::byte> x32 = filled(Dtype::f32, kRows * Kd, 1), w32 = filled(Dtype::f32, E * Kd * N, 2);
  Buffer<std::byte> x8 = filled(Dtype::s8, kRows * Kd, 3), w8 = filled(Dtype::s8, E * Kd * N, 4);
  std::vector<float> ls(size_t(kRows), 1e-3f), rs(size_t(E), 2e-3f);
  Buffer<std::byte> y(size_t(kRows * N) * sizeof(float));
  const Int8Operands in{reinterpret_cast<const int8_t*>(x8.data()), ls.data(),
                        reinterpret_cast<const int8_t*>(w8.data()), rs.data()};

  std::vector<Candidate> c;
  std::map<std::string, WeightPacks> packs;  // per variant: one packing of w8 each
  c.push_back(
      {std::string("nn bf16 (") + float_variant + ")", [&] {
         table(float_variant).nn(y.data(), Dtype::bf16, x16.data(), w16.data(), Dtype::bf16, groups, Kd, N);
       }});
  c.push_back(
      {std::string("nn f32 (") + float_variant + ")", [&] {
         table(float_variant).nn(y.data(), Dtype::f32, x32.data(), w32.data(), Dtype::f32, groups, Kd, N);
       }});
  for (const GemmVariant& v : gemm_variants()) {
    if (!v.tunable || std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn_s8)]) ||
        !v.unavailable().empty())
      continue;
    GemmCall call;
    call.form = GemmForm::nn_s8;
    call.in_dtype = call.b_dtype = Dtype::s8;
    call.out_dtype = Dtype::bf16;
    call.rows = kRows / E;
    call.experts = E;
    call.Kd = Kd;
    call.N = N;
    if (const std::string why = v.supports(call, GemmThresholds{}); !why.empty()) {
      std::printf("  (%s: no nn_s8 here: %s)\n", v.name, why.c_str());
      continue;
    }
    const std::string name = v.name;
    c.push_back({"nn_s8 -> bf16 (" + name + ")",
                 [&, name] { table(name).nn_s8(y.data(), Dtype::bf16, in, groups, Kd, N); }});
    // The same with the weights' packing kept across calls (int8_routed_prequant's case).
    c.push_back({"  packed once (" + name + ")", [&, name] {
                   Int8Operands kept = in;
                   kept.rhs_packs = &packs[name];
                   table(name).nn_s8(y.data(), Dtype::bf16, kept, groups, Kd, N);
                 }});
  }
  bench_rounds::time_rounds(c, rounds);
  const double ops = 2.0 * double(kRows) * double(Kd) * double(N);
  std::printf("%s layer: rows %lld (E = %lld), Kd = %lld, N = %lld, %d threads, best of %d\n", shape.layer,
              (long long)kRows, (long long)E, (long long)Kd, (long long)N, omp_get_max_threads(), rounds);
  for (const Candidate& k : c)
    std::printf("  %-28s %9.2f ms %8.1f GOP/s  %5.2fx bf16 nn  %5.2fx f32 nn\n", k.name.c_str(), k.best * 1e3,
                ops / k.best * 1e-9, c[0].best / k.best, c[1].best / k.best);
}

// The up projection with SwiGLU, as the block runs it (bf16 h and g; the int8 forms also quantize g's rows,
// down's input): bf16's fused nn_swiglu against each int8 variant's nn_s8_swiglu and its nn_s8 followed by
// SwiGLU's quantizing pass, the weights packed once (int8_routed_prequant's case), and nn_s8_swiglu packing
// them in the call (int8_routed's).
void bench_swiglu(const GemmShape& shape, int rounds) {
  const int64_t E = shape.experts, Kd = shape.Kd, M = shape.N / 2;
  const std::vector<int64_t> off = group_offsets(E);
  const GroupedShape groups{off.data(), E};
  const char* float_variant = std::getenv("MOE_GEMM_VARIANT") ? std::getenv("MOE_GEMM_VARIANT") : "auto";
  Buffer<std::byte> x16 = filled(Dtype::bf16, kRows * Kd, 1), w16 = filled(Dtype::bf16, E * Kd * 2 * M, 2);
  Buffer<std::byte> x8 = filled(Dtype::s8, kRows * Kd, 3), w8 = filled(Dtype::s8, E * Kd * 2 * M, 4);
  std::vector<float> ls(size_t(kRows), 1e-3f), rs(size_t(E), 2e-3f), g_scale(static_cast<size_t>(kRows));
  Buffer<std::byte> h(size_t(kRows * 2 * M) * 2), g(size_t(kRows * M) * 2), gq(size_t(kRows * M));
  const Int8Operands in{reinterpret_cast<const int8_t*>(x8.data()), ls.data(),
                        reinterpret_cast<const int8_t*>(w8.data()), rs.data()};
  int8_t* q = reinterpret_cast<int8_t*>(gq.data());
  std::vector<Candidate> c;
  std::map<std::string, WeightPacks> packs;
  c.push_back({std::string("nn_swiglu bf16 (") + float_variant + ")", [&] {
                 table(float_variant)
                     .nn_swiglu(h.data(), g.data(), Dtype::bf16, x16.data(), w16.data(), Dtype::bf16, groups,
                                Kd, M, nullptr, false);
               }});
  for (const GemmVariant& v : gemm_variants()) {
    if (!v.tunable || std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn_s8_swiglu)]) ||
        !v.unavailable().empty())
      continue;
    const std::string name = v.name;
    WeightPacks* kept = &packs[name];
    c.push_back({"nn_s8_swiglu (" + name + ")", [&, name, kept] {
                   Int8Operands once = in;
                   once.rhs_packs = kept;
                   table(name).nn_s8_swiglu({h.data(), g.data(), q, g_scale.data(), false}, Dtype::bf16, once,
                                            {}, groups, Kd, M, nullptr);
                 }});
    c.push_back({"  per call (" + name + ")", [&, name] {
                   table(name).nn_s8_swiglu({h.data(), g.data(), q, g_scale.data(), false}, Dtype::bf16, in,
                                            {}, groups, Kd, M, nullptr);
                 }});
    c.push_back({"  nn_s8, then the pass (" + name + ")", [&, name, kept] {
                   Int8Operands once = in;
                   once.rhs_packs = kept;
                   table(name).nn_s8(h.data(), Dtype::bf16, once, groups, Kd, 2 * M);
                   cpu::swiglu_forward_quantized(g.data(), Dtype::bf16, q, g_scale.data(),
                                                 {h.data(), h.data() + M * 2, 2 * M}, Dtype::bf16, kRows, M,
                                                 nullptr);
                 }});
  }
  bench_rounds::time_rounds(c, rounds);
  const double ops = 2.0 * double(kRows) * double(Kd) * double(2 * M);
  std::printf("%s layer, up projection with SwiGLU: rows %lld (E = %lld), Kd = %lld, M = %lld, best of %d\n",
              shape.layer, (long long)kRows, (long long)E, (long long)Kd, (long long)M, rounds);
  for (const Candidate& k : c)
    std::printf("  %-34s %9.2f ms %8.1f GOP/s  %5.2fx bf16 nn_swiglu\n", k.name.c_str(), k.best * 1e3,
                ops / k.best * 1e-9, c[0].best / k.best);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  constexpr const char* kTool = "moe_bench_nn_s8";
  constexpr const char* kUsage = "moe_bench_nn_s8 [rounds] [all|reference|seed]";
  int64_t rounds = 0;
  if (!moe::bench_args::at_most(argc, 2, kTool, kUsage) ||
      !moe::bench_args::count(argc, argv, 1, kTool, "rounds", 1, 1000, 7, rounds))
    return 2;
  const std::string layers = argc > 2 ? argv[2] : "all";
  if (layers != "all" && layers != "reference" && layers != "seed") {
    std::fprintf(stderr, "%s: error: invalid shapes '%s': expected all, reference or seed (usage: %s)\n",
                 kTool, layers.c_str(), kUsage);
    return 2;
  }
  if (const char* v = std::getenv("MOE_GEMM_VARIANT")) {
    if (const moe::Status s = moe::check_gemm_variant(v); !s.is_ok()) {
      std::fprintf(stderr, "moe_bench_nn_s8: error: MOE_GEMM_VARIANT=%s: %s\n", v, s.message().c_str());
      return 2;
    }
  }
  std::printf("gemm: %s\n", moe::gemm_library_version().c_str());
  for (const moe::GemmShape& shape : moe::kShapes) {
    if (layers != "all" && layers != shape.layer) continue;
    moe::bench_shape(shape, int(rounds));
    if (shape.up) moe::bench_swiglu(shape, int(rounds));
  }
  return 0;
}
