// SwiGLU's passes (cpu/ops/swiglu.h) at each ISA level this CPU reaches (cpu/ops/swiglu_isa.h), by default at
// issue 23's rows: 16384 rows (T = 8192, K = 2) of M = 1024, bf16, gate and up in one (rows, 2M) buffer. Each
// pass alone, and right after an int8 grouped GEMM of the kernel table's choice (the GEMM untimed: whether
// code after AMX/AVX-512 kernels pays a transition; on the AMX host it did not: the kernels log, git show
// 26fb9b0:docs/kernels.md, "Session 17"). Candidates interleaved round by round, best of the rounds kept.
// Prints milliseconds, GB/s of the pass's reads and writes, and nanoseconds an element a thread.
//
//   moe_bench_swiglu_passes [rounds=5] [rows=16384] [M=1024]   (small rows: the passes from cache)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_args.h"
#include "cpu/backend.h"
#include "cpu/gemm/gemm.h"
#include "cpu/ops/swiglu_isa.h"
#include "moe/cpu_isa.h"
#include "moe/rng.h"
#include "moe/tensor.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 1024, kExperts = 16;

struct Candidate {
  std::string name;
  std::function<void()> run;
  double bytes;
  double best = 1e30;
};

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int rounds, int64_t rows, int64_t M) {
  Buffer<bf16_t> h(size_t(rows * 2 * M)), g(size_t(rows * M)), dg(size_t(rows * M)), dh(size_t(rows * 2 * M));
  Buffer<int8_t> gq(size_t(rows * M)), x8(size_t(rows * kHidden)), w8(size_t(kExperts * kHidden * M));
  std::vector<float> scale(static_cast<size_t>(rows)), weight(static_cast<size_t>(rows), 0.5f),
      xs(static_cast<size_t>(rows), 1e-3f), ws(static_cast<size_t>(kExperts), 1e-3f);
  Buffer<float> y(size_t(rows * M));
#pragma omp parallel for
  for (int64_t i = 0; i < rows * 2 * M; ++i) h.data()[i] = f32_to_bf16(float(random_normal(1, uint64_t(i))));
#pragma omp parallel for
  for (int64_t i = 0; i < rows * M; ++i) dg.data()[i] = f32_to_bf16(float(random_normal(2, uint64_t(i))));
#pragma omp parallel for
  for (int64_t i = 0; i < rows * kHidden; ++i)
    x8.data()[i] = int8_t(int64_t(random_bits(3, uint64_t(i)) % 255) - 127);
#pragma omp parallel for
  for (int64_t i = 0; i < kExperts * kHidden * M; ++i)
    w8.data()[i] = int8_t(int64_t(random_bits(4, uint64_t(i)) % 255) - 127);
  std::vector<int64_t> off;
  for (int64_t e = 0; e <= kExperts; ++e) off.push_back(e * rows / kExperts);
  const GroupedShape groups{off.data(), kExperts};
  KernelConfig k;
  k.tuning_file = "none";
  GemmKernels table(k);
  const Int8Operands in{x8.data(), xs.data(), w8.data(), ws.data()};
  auto gemm = [&] { table.nn_s8(y.data(), Dtype::f32, in, groups, kHidden, M); };

  const cpu::GateUp gu{h.data(), h.data() + M, 2 * M};
  const cpu::GateUpGrad dgu{dh.data(), dh.data() + M, 2 * M};
  struct Level {
    const char* name;
    IsaLevel level;
    cpu::SwigluPasses passes;
  };
  const Level levels[] = {{"baseline", IsaLevel::baseline, cpu::baseline_swiglu_passes()},
                          {"avx2", IsaLevel::avx2, cpu::avx2_swiglu_passes()},
                          {"avx512_bf16", IsaLevel::avx512_bf16, cpu::avx512_bf16_swiglu_passes()}};
  const double elems = double(rows * M);
  std::vector<Candidate> c;
  for (const Level& l : levels) {
    if (isa_level() < l.level) continue;
    const cpu::SwigluPasses p = l.passes;
    const std::string at = std::string(" ") + l.name;
    // bytes: h read (2 x 2), g written (2, and read back for its fetch), gq (1)
    c.push_back(
        {"forward" + at,
         [p, &g, &gu, rows, M] { p.forward(g.data(), Dtype::bf16, gu, Dtype::bf16, rows, M, nullptr); },
         elems * 8});
    c.push_back({"forward_quantized" + at,
                 [p, &g, &gq, &scale, &weight, &gu, rows, M] {
                   p.forward_quantized(g.data(), Dtype::bf16, gq.data(), scale.data(), gu, Dtype::bf16, rows,
                                       M, weight.data());
                 },
                 elems * 9});
    c.push_back({"backward" + at,
                 [p, &dg, &dgu, &gu, rows, M] {
                   p.backward(dgu, Dtype::bf16, dg.data(), gu, Dtype::bf16, rows, M, nullptr);
                 },
                 elems * 14});
  }
  for (Candidate& x : c) x.run();  // pages, threads
  std::vector<double> after(c.size(), 1e30);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < c.size(); ++i) {
      c[i].best = std::min(c[i].best, seconds_of(c[i].run));
      gemm();
      after[i] = std::min(after[i], seconds_of(c[i].run));
    }
  const int threads = omp_get_max_threads();
  std::printf(
      "rows %lld, M = %lld, bf16, %d threads, ISA level %s, best of %d; then after an nn_s8 GEMM (%s)\n",
      (long long)rows, (long long)M, threads, isa_level_name(isa_level()), rounds,
      table.take_choices().c_str());
  for (size_t i = 0; i < c.size(); ++i)
    std::printf("  %-30s %8.2f ms %7.1f GB/s %6.2f ns/elem/thread   after the GEMM %8.2f ms\n",
                c[i].name.c_str(), c[i].best * 1e3, c[i].bytes / c[i].best * 1e-9,
                c[i].best * 1e9 * threads / elems, after[i] * 1e3);
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  constexpr const char* kTool = "moe_bench_swiglu_passes";
  // rows x M bounded so the buffers (h of rows x 2M and its copies) stay a few GiB at most.
  constexpr int64_t kMostElements = int64_t(1) << 28;
  int64_t rounds = 0, rows = 0, M = 0;
  if (!moe::bench_args::at_most(argc, 3, kTool, "moe_bench_swiglu_passes [rounds] [rows] [M]") ||
      !moe::bench_args::count(argc, argv, 1, kTool, "rounds", 1, 1000, 5, rounds) ||
      !moe::bench_args::count(argc, argv, 2, kTool, "rows", moe::kExperts, kMostElements, 16384, rows) ||
      !moe::bench_args::count(argc, argv, 3, kTool, "M", 1, kMostElements, 1024, M))
    return 2;
  if (rows * M > kMostElements) {
    std::fprintf(stderr, "%s: error: rows x M must be at most %lld (got %lld x %lld)\n", kTool,
                 (long long)kMostElements, (long long)rows, (long long)M);
    return 2;
  }
  return moe::run(int(rounds), rows, M);
}
