// The int8 GEMM (nn_s8, moe/gemm.h) against the float nn a bf16 run uses, at issue 23's shape: T = 8192
// tokens, K = 2, E = 16 experts of ~1024 rows (+-5 %, a fixed seed, exact rows: no padding), H = M = 1024:
// the up projection (Kd = 1024, N = 2M = 2048) and the down projection (Kd = 1024, N = 1024). Every
// candidate runs in the same process, interleaved round by round, and the best of the rounds is kept (the
// 2-core box is shared: contention only ever slows a call down). Prints, per GEMM, milliseconds, useful
// GOP/s (2 * rows * Kd * N) and the ratio to the bf16 nn (on AVX2 oneDNN computes bf16 in float32).
// Plain C++ (no Google Benchmark): the build always has it.
//
//   moe_bench_nn_s8 [rounds=7]          MOE_GEMM_VARIANT=<name> for the float nn (default auto)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_args.h"
#include "cpu/backend.h"
#include "moe/gemm.h"
#include "moe/rng.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {
namespace {

constexpr int64_t kRows = 16384, kHidden = 1024, kExperts = 16;
constexpr uint64_t kSeed = 20261127;

// (E+1) offsets of groups of 1024 +- 5 % rows summing to kRows.
std::vector<int64_t> group_offsets() {
  std::vector<int64_t> off{0};
  int64_t sum = 0;
  for (int64_t e = 0; e < kExperts; ++e) {
    const double jitter = (random_uniform(kSeed, uint64_t(e)) - 0.5) * 0.1;
    const int64_t n = e + 1 == kExperts
                          ? kRows - sum
                          : kRows / kExperts + int64_t(std::lround(jitter * double(kRows / kExperts)));
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

GemmKernels& table(const std::string& variant) {
  KernelConfig k;
  k.gemm_variant = variant;
  k.tuning_file = "none";  // no measuring: the variant named, else the table's order
  return cpu::cpu_gemm_kernels(k);
}

struct Candidate {
  std::string name;
  std::function<void()> run;
  double best = 1e30;
};

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_width(int64_t N, int rounds) {
  const std::vector<int64_t> off = group_offsets();
  const GroupedShape groups{off.data(), kExperts};
  const char* float_variant = std::getenv("MOE_GEMM_VARIANT") ? std::getenv("MOE_GEMM_VARIANT") : "auto";
  Buffer<std::byte> x16 = filled(Dtype::bf16, kRows * kHidden, 1),
                    w16 = filled(Dtype::bf16, kExperts * kHidden * N, 2);
  Buffer<std::byte> x32 = filled(Dtype::f32, kRows * kHidden, 1),
                    w32 = filled(Dtype::f32, kExperts * kHidden * N, 2);
  Buffer<std::byte> x8 = filled(Dtype::s8, kRows * kHidden, 3),
                    w8 = filled(Dtype::s8, kExperts * kHidden * N, 4);
  std::vector<float> ls(size_t(kRows), 1e-3f), rs(size_t(kExperts), 2e-3f);
  Buffer<std::byte> y(size_t(kRows * N) * sizeof(float));
  const Int8Operands in{reinterpret_cast<const int8_t*>(x8.data()), ls.data(),
                        reinterpret_cast<const int8_t*>(w8.data()), rs.data()};

  std::vector<Candidate> c;
  c.push_back({std::string("nn bf16 (") + float_variant + ")", [&] {
                 table(float_variant)
                     .nn(y.data(), Dtype::bf16, x16.data(), w16.data(), Dtype::bf16, groups, kHidden, N);
               }});
  c.push_back({std::string("nn f32 (") + float_variant + ")", [&] {
                 table(float_variant)
                     .nn(y.data(), Dtype::f32, x32.data(), w32.data(), Dtype::f32, groups, kHidden, N);
               }});
  for (const GemmVariant& v : gemm_variants()) {
    if (!v.tunable || std::holds_alternative<std::monostate>(v.fns[size_t(GemmForm::nn_s8)]) ||
        !v.unavailable().empty())
      continue;
    GemmCall call;
    call.form = GemmForm::nn_s8;
    call.in_dtype = call.b_dtype = Dtype::s8;
    call.out_dtype = Dtype::bf16;
    call.rows = kRows / kExperts;
    call.experts = kExperts;
    call.Kd = kHidden;
    call.N = N;
    if (const std::string why = v.supports(call, GemmThresholds{}); !why.empty()) {
      std::printf("  (%s: no nn_s8 here: %s)\n", v.name, why.c_str());
      continue;
    }
    const std::string name = v.name;
    c.push_back({"nn_s8 -> bf16 (" + name + ")",
                 [&, name] { table(name).nn_s8(y.data(), Dtype::bf16, in, groups, kHidden, N); }});
  }
  for (Candidate& k : c) k.run();  // warm: primitives, scratch, pages
  for (int r = 0; r < rounds; ++r)
    for (Candidate& k : c) k.best = std::min(k.best, seconds_of(k.run));
  const double ops = 2.0 * double(kRows) * double(kHidden) * double(N);
  std::printf("rows %lld (E = %lld), Kd = %lld, N = %lld, %d threads, best of %d\n", (long long)kRows,
              (long long)kExperts, (long long)kHidden, (long long)N, omp_get_max_threads(), rounds);
  for (const Candidate& k : c)
    std::printf("  %-28s %9.2f ms %8.1f GOP/s  %5.2fx bf16 nn  %5.2fx f32 nn\n", k.name.c_str(), k.best * 1e3,
                ops / k.best * 1e-9, c[0].best / k.best, c[1].best / k.best);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  constexpr const char* kTool = "moe_bench_nn_s8";
  int64_t rounds = 0;
  if (!moe::bench_args::at_most(argc, 1, kTool, "moe_bench_nn_s8 [rounds]") ||
      !moe::bench_args::count(argc, argv, 1, kTool, "rounds", 1, 1000, 7, rounds))
    return 2;
  if (const char* v = std::getenv("MOE_GEMM_VARIANT")) {
    if (const moe::Status s = moe::check_gemm_variant(v); !s.is_ok()) {
      std::fprintf(stderr, "moe_bench_nn_s8: error: MOE_GEMM_VARIANT=%s: %s\n", v, s.message().c_str());
      return 2;
    }
  }
  std::printf("gemm: %s\n", moe::gemm_library_version().c_str());
  for (int64_t N : {int64_t(2048), int64_t(1024)}) moe::bench_width(N, int(rounds));
  return 0;
}
