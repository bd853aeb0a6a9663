// The grouped GEMMs at few rows per expert (decode steps, small micro-batches: the memory-bound regime of
// issue 40), every variant that takes the call with its own kernel, against a sequential read of the same
// weights timed in the same process (the bandwidth a GEMM that reads each weight byte once could reach).
// Forms: nn (the forward: out = lhs @ w, weights read), nt (the backward's data gradient: out = dout @ w^T,
// weights read), tn (the weight gradient: dw = lhs^T @ dout, every expert's gradient written: the read is
// then a yardstick, not a bound). Shapes: Qwen3-30B-A3B's and OLMoE-1B-7B's expert projections (up: Kd = H,
// N = 2M; down: Kd = M, N = H), 64 experts (200-512 MiB of bf16 weights, far past the caches), 1 to 256 rows
// an expert (gemv's range, 64 or 128, and past it); fewer experts (2-4: 12-32 MiB) leave the weights in the
// last-level cache, where the arithmetic alone counts. Candidates run interleaved round by round and the best
// round is kept (the 2-core box is shared: contention only ever slows a call down, and its memory bandwidth
// moves by 2x from minute to minute, so only the ratio to the read of the same round's process means
// anything). "gemv kept" and "amx kept" (nn) are gemv and amx on weights they packed once in their own layout
// (a forward run's), "gemv parts" gemv on the weights as two parts of N / 2 columns each (forward_backward's
// up, [w1 | w3]); for tn, "write" is a streaming write of the gradient's bytes (the probes' write kernel).
// Prints per call: ms, GB/s of weights, x the read, TF/s.
//
//   moe_bench_few_rows [rounds=5] [rows=all|1-256] [variants=all|gemv,avx2,...] [experts=64] [form=nn|nt|tn]
// rows all: 1, 2, 4, 8, 16, 32, 48, 64, 96 and 128; variants: those named (gemv also runs "gemv kept" and
// "gemv parts", amx "amx kept") and the read.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/probes/bandwidth.h"
#include "bench_args.h"
#include "bench_rounds.h"
#include "cpu/gemm/gemm.h"
#include "moe/tensor.h"

namespace moe {
namespace {

constexpr int64_t kRowCounts[] = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128};

struct Projection {
  const char* name;
  int64_t Kd, N;
};
constexpr Projection kProjections[] = {{"qwen3-30b-a3b up", 2048, 1536},
                                       {"qwen3-30b-a3b down", 768, 2048},
                                       {"olmoe-1b-7b up", 2048, 2048},
                                       {"olmoe-1b-7b down", 1024, 2048}};

// Bounded bf16 values without denormals (the speed does not depend on them), written by the threads that
// read them.
void fill(Buffer<bf16_t>& buf) {
  const int64_t n = int64_t(buf.size());
  bf16_t* p = buf.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    p[i] = f32_to_bf16(float(int64_t((uint64_t(i) * 2654435761u >> 7) % 2001) - 1000) / 4000.0f);
}

using bench_rounds::Candidate;
using bench_rounds::table;

// The variants whose own kernel runs this call (not a later row's).
std::vector<std::string> own_kernels(const GemmCall& call) {
  std::vector<std::string> names;
  for (const GemmVariant& v : gemm_variants())
    if (v.tunable && v.unavailable().empty() && table(v.name).row_for(call).variant == &v)
      names.push_back(v.name);
  return names;
}

// Whether candidate `name` runs: every one, or those named (a variant's name also names its kept form).
bool chosen(const std::string& name, const std::vector<std::string>& only) {
  if (only.empty() || name == "read") return true;
  for (const std::string& v : only)
    if (name == v || name == v + " kept" || name == v + " parts") return true;
  return false;
}

// A comma-separated list of GEMM variants' names into `only`; an unknown or empty name: one error line.
bool variant_list(const std::string& list, const char* tool, const char* usage,
                  std::vector<std::string>& only) {
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    const auto& all = gemm_variants();
    if (std::none_of(all.begin(), all.end(), [&](const GemmVariant& v) { return v.name == name; })) {
      std::fprintf(stderr, "%s: error: invalid variant '%s' (usage: %s; moe-bench --list names them)\n", tool,
                   name.c_str(), usage);
      return false;
    }
    only.push_back(name);
    begin = end + 1;
  }
  return true;
}

// The form's call of variant `name` on weights (or the weight gradient) w (E, Kd, N), `total` rows of lhs
// (total, Kd) and dout (total, N) in groups, into out (nn: (total, N); nt: (total, Kd)).
std::function<void()> form_call(GemmForm form, const std::string& name, const Projection& p,
                                Buffer<bf16_t>& w, const Buffer<bf16_t>& lhs, const Buffer<bf16_t>& dout,
                                Buffer<bf16_t>& out, GroupedShape groups) {
  if (form == GemmForm::nt)
    return [&, name, groups] {
      table(name).nt(out.data(), Dtype::bf16, dout.data(), w.data(), Dtype::bf16, groups, p.Kd, p.N);
    };
  if (form == GemmForm::tn)
    return [&, name, groups] {
      table(name).tn(w.data(), Dtype::bf16, lhs.data(), dout.data(), Dtype::bf16, groups, p.Kd, p.N, p.N);
    };
  return [&, name, groups] {
    table(name).nn(out.data(), Dtype::bf16, lhs.data(), w.data(), Dtype::bf16, groups, p.Kd, p.N);
  };
}

void bench_projection(const Projection& p, Buffer<bf16_t>& w, int64_t experts, int64_t rows, int rounds,
                      const std::vector<std::string>& only, GemmForm form) {
  const int64_t total = experts * rows;
  // lhs (rows, Kd), dout (rows, N), out (rows, max(Kd, N)): nn's (rows, N) or nt's (rows, Kd)
  Buffer<bf16_t> lhs(size_t(total * p.Kd)), dout(size_t(total * p.N)),
      out(size_t(total * std::max(p.Kd, p.N)));
  fill(lhs);
  fill(dout);
  std::vector<int64_t> offset(size_t(experts + 1));
  for (int64_t e = 0; e <= experts; ++e) offset[size_t(e)] = e * rows;
  const GroupedShape groups{offset.data(), experts};
  const int64_t bytes = experts * p.Kd * p.N * 2;
  GemmCall call;
  call.form = form;
  call.in_dtype = call.b_dtype = call.out_dtype = Dtype::bf16;
  call.rows = rows;
  call.experts = experts;
  call.Kd = p.Kd;
  call.N = p.N;
  volatile uint64_t sink = 0;
  const int threads = omp_get_max_threads();
  std::vector<Candidate> c{{"read", [&] { sink = sink + bench::read_words(w.data(), bytes, threads); }}};
  // tn's bound at a few rows: a streaming write of the gradient's bytes (nonzero values), in the same rounds.
  if (form == GemmForm::tn)
    c.push_back({"write", [&] { bench::write_words(w.data(), bytes, threads, 0x3f803f803f803f80u); }});
  for (const std::string& name : own_kernels(call))
    if (chosen(name, only)) c.push_back({name, form_call(form, name, p, w, lhs, dout, out, groups)});
  // The variants that pack kept weights once, on the weights packed in their own layout (a forward run's: the
  // first, untimed call packs): gemv's tile order, amx's B tiles.
  WeightPacks packs;
  GemmCall kept_call = call;
  kept_call.weights_kept = true;
  for (const std::string& name : form == GemmForm::nn ? own_kernels(kept_call) : std::vector<std::string>{})
    if (packs_kept_bf16_weights(name) && chosen(name + " kept", only)) {
      const ExpertWeights kept = ExpertWeights(w.data()).kept(&packs);
      auto run = [&, name, kept] {
        table(name).nn(out.data(), Dtype::bf16, lhs.data(), kept, Dtype::bf16, groups, p.Kd, p.N);
      };
      run();
      c.push_back({name + " kept", run});
    }
  // gemv on two weight parts [w1 | w3] read where they lie (forward_backward's up: the seed builds w13 inside
  // the differentiated call, which the block skips): the same bytes as (E, Kd, N / 2) twice.
  const bool gemv_runs =
      form == GemmForm::nn && table("gemv").row_for(call).variant->name == std::string("gemv");
  if (gemv_runs && p.N % 2 == 0 && chosen("gemv parts", only)) {
    const ExpertWeights parts(w.data(), w.data() + experts * p.Kd * p.N / 2);
    c.push_back({"gemv parts", [&, parts] {
                   table("gemv").nn(out.data(), Dtype::bf16, lhs.data(), parts, Dtype::bf16, groups, p.Kd,
                                    p.N);
                 }});
  }
  bench_rounds::time_rounds(c, rounds);
  std::printf("%s %s: Kd = %lld, N = %lld, %lld experts x %lld rows, %d threads, best of %d\n", name(form),
              p.name, (long long)p.Kd, (long long)p.N, (long long)experts, (long long)rows,
              omp_get_max_threads(), rounds);
  const double flops = 2.0 * double(total) * double(p.Kd) * double(p.N);
  for (const Candidate& k : c)
    std::printf("  %-10s %8.2f ms %7.1f GB/s  %4.2fx read  %6.3f TF/s\n", k.name.c_str(), k.best * 1e3,
                double(bytes) / k.best * 1e-9, c[0].best / k.best, flops / k.best * 1e-12);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  constexpr const char* kTool = "moe_bench_few_rows";
  constexpr const char* kUsage =
      "moe_bench_few_rows [rounds] [all|1-256] [all|VARIANT[,VARIANT...]] [experts] [nn|nt|tn]";
  int64_t rounds = 0, only_rows = 0, experts = 0;
  if (!moe::bench_args::at_most(argc, 5, kTool, kUsage) ||
      !moe::bench_args::count(argc, argv, 1, kTool, "rounds", 1, 1000, 5, rounds) ||
      !moe::bench_args::count(argc, argv, 4, kTool, "experts", 1, 64, 64, experts))
    return 2;
  const std::string rows = argc > 2 ? argv[2] : "all";
  if (rows != "all" && !moe::bench_args::count(argc, argv, 2, kTool, "rows", 1, 256, 0, only_rows)) return 2;
  std::vector<std::string> only;
  if (argc > 3 && std::string(argv[3]) != "all" && !moe::variant_list(argv[3], kTool, kUsage, only)) return 2;
  const std::string form_arg = argc > 5 ? argv[5] : "nn";
  const moe::GemmForm form = form_arg == "nt"   ? moe::GemmForm::nt
                             : form_arg == "tn" ? moe::GemmForm::tn
                                                : moe::GemmForm::nn;
  if (form_arg != moe::name(form)) {
    std::fprintf(stderr, "%s: error: invalid form '%s' (usage: %s)\n", kTool, form_arg.c_str(), kUsage);
    return 2;
  }
  std::printf("gemm: %s\n", moe::gemm_library_version().c_str());
  for (const moe::Projection& p : moe::kProjections) {
    moe::Buffer<moe::bf16_t> w(size_t(experts * p.Kd * p.N));  // (E, Kd, N): weights, or tn's gradients
    moe::fill(w);
    if (rows != "all") {
      moe::bench_projection(p, w, experts, only_rows, int(rounds), only, form);
      continue;
    }
    for (int64_t r : moe::kRowCounts) moe::bench_projection(p, w, experts, r, int(rounds), only, form);
  }
  return 0;
}
