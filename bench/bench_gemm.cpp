// Micro-benchmark of the CPU GEMMs (moe/gemm.h) at the acceptance shape: A = T*K = 16384 live rows,
// H = 1024, E = 16 experts of ~1024 rows (+-5%, fixed seed), contiguous layout padded to 64 rows.
// The weights are w13 (E, H, N) with N = 2M = 2048 (and N = 1024, the w2-sized GEMM). Every figure
// is GFLOP/s of useful work (2 * 16384 * H * N; padding rows count as overhead) and, in the summary
// printed at the end, a ratio to the dense GEMM [16384, H] x [H, N] of the same dtype measured in the
// same process: runs are interleaved at random and the best repetition of each is kept, because the
// 2-core box is shared and contention only ever slows a run down.
//
// Besides the library's forms (nn, nt, tn, dense), the oneDNN build times the variants that were tried
// and rejected, or that need a header change (prepacked weights), so docs/kernels.md can be reproduced:
//   bench_gemm                                   all of it (~4 min)
//   bench_gemm --benchmark_filter='bf16/N2048'   one dtype and width
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/gemm.h"
#include "moe/rng.h"
#include "moe/status.h"
#include "moe/tensor.h"

#ifdef MOE_HAVE_ONEDNN
#include <compare>
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace moe {
namespace {

constexpr int64_t kLiveRows = 16384, kHidden = 1024, kExperts = 16, kTile = 64;
constexpr uint64_t kGroupSeed = 20261126;

std::byte* offset(Buffer<std::byte>& buf, int64_t elements, Dtype dt) {
  return buf.data() + size_t(elements) * dtype_size(dt);
}

// Bounded values without denormals; the GEMM's speed does not depend on them.
Buffer<std::byte> filled(Dtype dt, int64_t n) {
  Buffer<std::byte> buf(size_t(n) * dtype_size(dt));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(int64_t((uint64_t(i) * 2654435761u >> 7) % 2001) - 1000) / 4000.0f;
    if (dt == Dtype::f32)
      reinterpret_cast<float*>(buf.data())[i] = v;
    else
      reinterpret_cast<bf16_t*>(buf.data())[i] = f32_to_bf16(v);
  }
  return buf;
}

// (E+1) group offsets for sizes 1024 +- 5% summing to kLiveRows, each padded to a multiple of `tile`
// (kTile: the contiguous layout; 1: the exact/ragged layout).
std::vector<int64_t> group_offsets(int64_t tile) {
  std::vector<int64_t> live(kExperts);
  int64_t sum = 0;
  for (int64_t e = 0; e < kExperts; ++e) {
    live[size_t(e)] =
        kLiveRows / kExperts + int64_t(std::lround((random_uniform(kGroupSeed, uint64_t(e)) - 0.5) * 102));
    sum += live[size_t(e)];
  }
  live.back() += kLiveRows - sum;
  std::vector<int64_t> off{0};
  for (int64_t n : live) off.push_back(off.back() + (n + tile - 1) / tile * tile);
  return off;
}

#ifdef MOE_HAVE_ONEDNN
// Direct oneDNN matmuls for the variants the library does not run.
namespace direct {

using dnnl::memory;
using Tag = memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

enum class Weights { plain, transposed, packed };  // how the matmul reads b

// c (m, n) = a (m, k) @ b (k, n); a stored (k, m) when trans_a.
struct Key {
  int64_t m, k, n;
  Dtype dt;
  bool trans_a;
  Weights b;
  auto operator<=>(const Key&) const = default;
};

struct Matmul {
  dnnl::matmul prim;
  memory::desc a, b, c;
};

memory::data_type dnnl_type(Dtype dt) {
  return dt == Dtype::f32 ? memory::data_type::f32 : memory::data_type::bf16;
}
memory::desc matrix(int64_t rows, int64_t cols, Dtype dt, Tag tag) {
  return {{rows, cols}, dnnl_type(dt), tag};
}

const Matmul& get(const Key& key) {
  static std::map<Key, Matmul> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const memory::desc a = matrix(key.m, key.k, key.dt, key.trans_a ? Tag::ba : Tag::ab);
  const memory::desc b = matrix(key.k, key.n, key.dt,
                                key.b == Weights::plain        ? Tag::ab
                                : key.b == Weights::transposed ? Tag::ba
                                                               : Tag::any);
  const memory::desc c = matrix(key.m, key.n, key.dt, Tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
  return cache.emplace(key, Matmul{dnnl::matmul(pd), a, pd.weights_desc(), c}).first->second;
}

void run(const Key& key, const void* a, const void* b, void* c) {
  const Matmul& mm = get(key);
  memory am(mm.a, engine(), const_cast<void*>(a)), bm(mm.b, engine(), const_cast<void*>(b)),
      cm(mm.c, engine(), c);
  mm.prim.execute(stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream().wait();
}

// The blocked weight layout brgemm picks for b (k, n); it does not depend on M (checked in setup).
memory::desc packed(int64_t m, int64_t k, int64_t n, Dtype dt) {
  return get({m, k, n, dt, false, Weights::packed}).b;
}

void reorder(const memory::desc& src, const void* from, const memory::desc& dst, void* to) {
  static std::vector<std::pair<dnnl::reorder::primitive_desc, dnnl::reorder>> cache;
  auto it = std::find_if(cache.begin(), cache.end(), [&](const auto& r) {
    return r.first.src_desc() == src && r.first.dst_desc() == dst;
  });
  if (it == cache.end()) {
    dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst);
    it = cache.insert(cache.end(), {pd, dnnl::reorder(pd)});
  }
  memory s(src, engine(), const_cast<void*>(from)), d(dst, engine(), to);
  it->second.execute(stream(), s, d);
  stream().wait();
}

}  // namespace direct
#endif

// One dtype and width: the contiguous-layout buffers of the forward (x @ w -> y) and the backward
// (dh @ w^T -> dx, x^T @ dh -> dw). The dense GEMM reads the first kLiveRows rows of x and expert 0.
struct Problem {
  Dtype dt;
  int64_t N;
  std::vector<int64_t> off, ragged;  // (E+1) contiguous layout; the same live rows without padding
  int64_t rows;                      // padded buffer rows
  // x (rows, H), w (E, H, N), dh (rows, N), y (rows, N), dx (rows, H), dw (E, H, N)
  Buffer<std::byte> x, w, dh, y, dx, dw;
#ifdef MOE_HAVE_ONEDNN
  size_t packed_bytes = 0, packed_t_bytes = 0;
  // w[e] and w[e]^T in brgemm's layout (E of each); scratch for the variants that pack per call
  Buffer<std::byte> w_packed, wt_packed, scratch_b;
#endif

  Problem(Dtype dtype, int64_t width)
      : dt(dtype), N(width), off(group_offsets(kTile)), ragged(group_offsets(1)), rows(off.back()) {
    x = filled(dt, rows * kHidden);
    w = filled(dt, kExperts * kHidden * N);
    dh = filled(dt, rows * N);
    y = Buffer<std::byte>(size_t(rows * N) * dtype_size(dt));
    dx = Buffer<std::byte>(size_t(rows * kHidden) * dtype_size(dt));
    dw = Buffer<std::byte>(size_t(kExperts * kHidden * N) * dtype_size(dt));
#ifdef MOE_HAVE_ONEDNN
    using direct::matrix, direct::packed;
    using Tag = dnnl::memory::format_tag;
    const auto pw = packed(kLiveRows, kHidden, N, dt), pwt = packed(kLiveRows, N, kHidden, dt);
    for (int64_t e = 0; e < kExperts; ++e)
      MOE_CHECK(packed(group_rows(e), kHidden, N, dt) == pw && packed(group_rows(e), N, kHidden, dt) == pwt,
                "brgemm's packed weight layout depends on M");
    packed_bytes = pw.get_size();
    packed_t_bytes = pwt.get_size();
    w_packed = Buffer<std::byte>(packed_bytes * kExperts);
    wt_packed = Buffer<std::byte>(packed_t_bytes * kExperts);
    for (int64_t e = 0; e < kExperts; ++e) {
      direct::reorder(matrix(kHidden, N, dt, Tag::ab), expert(w, e), pw,
                      w_packed.data() + packed_bytes * size_t(e));
      direct::reorder(matrix(N, kHidden, dt, Tag::ba), expert(w, e), pwt,
                      wt_packed.data() + packed_t_bytes * size_t(e));
    }
    size_t b_bytes = packed_t_bytes;
    for (int64_t e = 0; e < kExperts; ++e)
      b_bytes = std::max(
          b_bytes, direct::get({kHidden, group_rows(e), N, dt, true, direct::Weights::packed}).b.get_size());
    scratch_b = Buffer<std::byte>(b_bytes);
#endif
  }

  int64_t group_rows(int64_t e) const {
    return off[size_t(e) + 1] - off[size_t(e)];
  }
  GroupedShape groups() const {
    return {off.data(), kExperts};
  }
  GroupedShape ragged_groups() const {
    return {ragged.data(), kExperts};
  }
  std::byte* expert(Buffer<std::byte>& buf, int64_t e) {
    return offset(buf, e * kHidden * N, dt);
  }
};

Problem& problem(Dtype dt, int64_t N) {
  static std::map<std::pair<Dtype, int64_t>, std::unique_ptr<Problem>> cache;
  auto& p = cache[{dt, N}];
  if (!p) p = std::make_unique<Problem>(dt, N);
  return *p;
}

using Variant = void (*)(Problem&);

const std::pair<const char*, Variant> kVariants[] = {
    // The library, as the MoE block calls it. "dense" is the ceiling every ratio refers to.
    {"dense",
     [](Problem& p) {
       dense_gemm(p.y.data(), p.dt, p.x.data(), p.dt, p.w.data(), p.dt, kLiveRows, kHidden, p.N);
     }},
    {"nn",
     [](Problem& p) {
       grouped_gemm_nn(p.y.data(), p.dt, p.x.data(), p.w.data(), p.dt, p.groups(), kHidden, p.N);
     }},
    {"nt",
     [](Problem& p) {
       grouped_gemm_nt(p.dx.data(), p.dt, p.dh.data(), p.w.data(), p.dt, p.groups(), kHidden, p.N);
     }},
    {"tn",
     [](Problem& p) {
       grouped_gemm_tn(p.dw.data(), p.dt, p.x.data(), p.dh.data(), p.dt, p.groups(), kHidden, p.N);
     }},
    // The exact/ragged layout: the same rows without the padding to kTile (what padding costs).
    {"nn_ragged",
     [](Problem& p) {
       grouped_gemm_nn(p.y.data(), p.dt, p.x.data(), p.w.data(), p.dt, p.ragged_groups(), kHidden, p.N);
     }},
    {"nt_ragged",
     [](Problem& p) {
       grouped_gemm_nt(p.dx.data(), p.dt, p.dh.data(), p.w.data(), p.dt, p.ragged_groups(), kHidden, p.N);
     }},
    {"tn_ragged",
     [](Problem& p) {
       grouped_gemm_tn(p.dw.data(), p.dt, p.x.data(), p.dh.data(), p.dt, p.ragged_groups(), kHidden, p.N);
     }},
#ifdef MOE_HAVE_ONEDNN
    // Weights read as stored: brgemm copies them into its layout once per chunk of M.
    {"dense_plainB",
     [](Problem& p) {
       direct::run({kLiveRows, kHidden, p.N, p.dt, false, direct::Weights::plain}, p.x.data(), p.w.data(),
                   p.y.data());
     }},
    {"nn_plainB",
     [](Problem& p) {
       for (int64_t e = 0; e < kExperts; ++e)
         direct::run({p.group_rows(e), kHidden, p.N, p.dt, false, direct::Weights::plain},
                     offset(p.x, p.off[size_t(e)] * kHidden, p.dt), p.expert(p.w, e),
                     offset(p.y, p.off[size_t(e)] * p.N, p.dt));
     }},
    {"tn_plainB",
     [](Problem& p) {
       for (int64_t e = 0; e < kExperts; ++e)
         direct::run({kHidden, p.group_rows(e), p.N, p.dt, true, direct::Weights::plain},
                     offset(p.x, p.off[size_t(e)] * kHidden, p.dt),
                     offset(p.dh, p.off[size_t(e)] * p.N, p.dt), p.expert(p.dw, e));
     }},
    // Weights packed once, outside the timed region: what a prepacked-weights API would buy.
    {"dense_prepacked",
     [](Problem& p) {
       direct::run({kLiveRows, kHidden, p.N, p.dt, false, direct::Weights::packed}, p.x.data(),
                   p.w_packed.data(), p.y.data());
     }},
    {"nn_prepacked",
     [](Problem& p) {
       for (int64_t e = 0; e < kExperts; ++e)
         direct::run({p.group_rows(e), kHidden, p.N, p.dt, false, direct::Weights::packed},
                     offset(p.x, p.off[size_t(e)] * kHidden, p.dt),
                     p.w_packed.data() + p.packed_bytes * size_t(e),
                     offset(p.y, p.off[size_t(e)] * p.N, p.dt));
     }},
    {"nt_prepacked",
     [](Problem& p) {
       for (int64_t e = 0; e < kExperts; ++e)
         direct::run({p.group_rows(e), p.N, kHidden, p.dt, false, direct::Weights::packed},
                     offset(p.dh, p.off[size_t(e)] * p.N, p.dt),
                     p.wt_packed.data() + p.packed_t_bytes * size_t(e),
                     offset(p.dx, p.off[size_t(e)] * kHidden, p.dt));
     }},
    // w^T packed per call by oneDNN's transposing reorder, instead of read through strides.
    {"nt_packB",
     [](Problem& p) {
       using Tag = dnnl::memory::format_tag;
       for (int64_t e = 0; e < kExperts; ++e) {
         const int64_t m = p.group_rows(e);
         direct::reorder(direct::matrix(p.N, kHidden, p.dt, Tag::ba), p.expert(p.w, e),
                         direct::packed(m, p.N, kHidden, p.dt), p.scratch_b.data());
         direct::run({m, p.N, kHidden, p.dt, false, direct::Weights::packed},
                     offset(p.dh, p.off[size_t(e)] * p.N, p.dt), p.scratch_b.data(),
                     offset(p.dx, p.off[size_t(e)] * kHidden, p.dt));
       }
     }},
    // x_e^T read through strides rather than transposed into scratch (dh_e packed per call as in "tn").
    {"tn_stridedA",
     [](Problem& p) {
       using Tag = dnnl::memory::format_tag;
       for (int64_t e = 0; e < kExperts; ++e) {
         const direct::Key key{kHidden, p.group_rows(e), p.N, p.dt, true, direct::Weights::packed};
         direct::reorder(direct::matrix(key.k, p.N, p.dt, Tag::ab),
                         offset(p.dh, p.off[size_t(e)] * p.N, p.dt), direct::get(key).b, p.scratch_b.data());
         direct::run(key, offset(p.x, p.off[size_t(e)] * kHidden, p.dt), p.scratch_b.data(),
                     p.expert(p.dw, e));
       }
     }},
#endif
};

void run_variant(benchmark::State& state, Dtype dt, int64_t N, Variant variant) {
  Problem& p = problem(dt, N);
  variant(p);  // first call builds and caches the primitives
  for (auto _ : state) variant(p);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(kLiveRows * kHidden * N),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pad_rows"] = double(p.rows - kLiveRows);
}

// Prints the console rows as usual, keeps each benchmark's best GFLOP/s, and ends with the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      double& best = best_[run.run_name.function_name];
      best = std::max(best, double(run.counters.at("GFLOP/s")));
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-28s %9s %9s\n", "benchmark (best repetition)", "GFLOP/s", "/ dense");
    for (const auto& [name, gflops] : best_) {
      const auto dense = best_.find(name.substr(0, name.rfind('/')) + "/dense");
      std::printf("%-28s %9.1f %9s\n", name.c_str(), gflops,
                  dense == best_.end() ? "-" : std::to_string(gflops / dense->second).substr(0, 5).c_str());
    }
  }

 private:
  std::map<std::string, double> best_;
};

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  using namespace moe;
  // Defaults suited to a shared 2-core box; any flag given on the command line overrides them.
  std::vector<char*> args{argv[0]};
  std::string reps = "--benchmark_repetitions=5", interleave = "--benchmark_enable_random_interleaving=true",
              min_time = "--benchmark_min_time=0.5";
  for (std::string* s : {&reps, &interleave, &min_time}) args.push_back(s->data());
  args.insert(args.end(), argv + 1, argv + argc);
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::AddCustomContext("gemm", gemm_library_version());
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));

  for (Dtype dt : {Dtype::bf16, Dtype::f32}) {
    for (int64_t N : {int64_t(2048), int64_t(1024)}) {
      for (const auto& [name, variant] : kVariants) {
        const std::string vname = name;
        // The comparison variants only at the acceptance width, to keep the full run short.
        if (N != 2048 && vname != "dense" && vname != "nn" && vname != "nt" && vname != "tn") continue;
        const std::string full =
            std::string(dt == Dtype::bf16 ? "bf16" : "f32") + "/N" + std::to_string(N) + "/" + vname;
        benchmark::RegisterBenchmark(full.c_str(), run_variant, dt, N, variant)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
