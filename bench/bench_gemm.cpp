// Micro-benchmark of the CPU GEMMs (cpu/gemm/gemm.h) at the acceptance shape: A = T*K = 16384 live rows,
// H = 1024, E = 16 experts of ~1024 rows (+-5%, fixed seed), contiguous layout padded to 64 rows.
// The weights are w13 (E, H, N) with N = 2M = 2048 (and N = 1024, the w2-sized GEMM). Every figure
// is GFLOP/s of useful work (2 * 16384 * H * N; padding rows count as overhead) and, in the summary
// printed at the end, a ratio to the library's dense GEMM [16384, H] x [H, N] of the same dtype
// measured in the same process: runs are interleaved at random and the best repetition of each is
// kept, because the 2-core box is shared and contention only ever slows a run down.
//
// Besides the library's forms (dense, nn, nt, tn), the oneDNN build times the other ways of running
// the same products that were tried (docs/kernels.md), by mechanism:
//   plainB     brgemm reading every operand as stored (b copied into its layout per chunk of M)
//   packB      brgemm after a per-call reorder of b into its blocked layout
//   prepacked  brgemm on weights packed once outside the timed region (needs a header change)
//   gemmjit    oneDNN's BLAS-style gemm:jit (reached through runtime dims), operands as stored
//   stridedA / transposeA   tn's x^T read through strides / transposed into scratch (b packed per call)
// and the exact/ragged layout (same rows, no padding). Usage:
//   bench_gemm                                   all of it (~6 min)
//   bench_gemm --benchmark_filter='bf16/N2048'   one dtype and width
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/backend.h"
#include "cpu/gemm/gemm.h"
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
    const double jitter = (random_uniform(kGroupSeed, uint64_t(e)) - 0.5) * 0.1;
    live[size_t(e)] = kLiveRows / kExperts + int64_t(std::lround(jitter * double(kLiveRows / kExperts)));
    sum += live[size_t(e)];
  }
  live.back() += kLiveRows - sum;
  std::vector<int64_t> off{0};
  for (int64_t n : live) off.push_back(off.back() + (n + tile - 1) / tile * tile);
  return off;
}

// One dtype and width: the contiguous-layout buffers of the forward (x @ w -> y) and the backward
// (dh @ w^T -> dx, x^T @ dh -> dw). The dense GEMM reads the first kLiveRows rows of x and expert 0.
struct Problem {
  Dtype dt;
  int64_t N;
  std::vector<int64_t> off, ragged;  // (E+1) contiguous layout; the same live rows without padding
  int64_t rows;                      // padded buffer rows
  // x (rows, H), w (E, H, N), dh (rows, N), y (rows, N), dx (rows, H), dw (E, H, N)
  Buffer<std::byte> x, w, dh, y, dx, dw;

  Problem(Dtype dtype, int64_t width)
      : dt(dtype), N(width), off(group_offsets(kTile)), ragged(group_offsets(1)), rows(off.back()) {
    x = filled(dt, rows * kHidden);
    w = filled(dt, kExperts * kHidden * N);
    dh = filled(dt, rows * N);
    y = Buffer<std::byte>(size_t(rows * N) * dtype_size(dt));
    dx = Buffer<std::byte>(size_t(rows * kHidden) * dtype_size(dt));
    dw = Buffer<std::byte>(size_t(kExperts * kHidden * N) * dtype_size(dt));
  }

  GroupedShape groups() const { return {off.data(), kExperts}; }
  GroupedShape ragged_groups() const { return {ragged.data(), kExperts}; }
  // Element `i` of `buf`.
  std::byte* at(Buffer<std::byte>& buf, int64_t i) const { return buf.data() + size_t(i) * dtype_size(dt); }
};

Problem& problem(Dtype dt, int64_t N) {
  static std::map<std::pair<Dtype, int64_t>, std::unique_ptr<Problem>> cache;
  auto& p = cache[{dt, N}];
  if (!p) p = std::make_unique<Problem>(dt, N);
  return *p;
}

#ifdef MOE_HAVE_ONEDNN
// The library's products run directly on oneDNN by other mechanisms.
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

memory::data_type dnnl_type(Dtype dt) {
  return dt == Dtype::f32 ? memory::data_type::f32 : memory::data_type::bf16;
}

memory::desc matrix(memory::dim rows, memory::dim cols, Dtype dt, bool transposed) {
  return {{rows, cols}, dnnl_type(dt), transposed ? Tag::ba : Tag::ab};
}

// c (m, n) = a (m, k) @ b (k, n); a stored (k, m) when trans_a, b stored (n, k) when trans_b.
struct Product {
  int64_t m, k, n;
  bool trans_a, trans_b;
  const void* a;
  const void* b;
  void* c;
};

// Expert e's product in each form, and the dense one.
Product nn(Problem& p, int64_t e) {
  const int64_t r0 = p.off[size_t(e)], m = p.off[size_t(e) + 1] - r0;
  return {m,
          kHidden,
          p.N,
          false,
          false,
          p.at(p.x, r0 * kHidden),
          p.at(p.w, e * kHidden * p.N),
          p.at(p.y, r0 * p.N)};
}
Product nt(Problem& p, int64_t e) {
  const int64_t r0 = p.off[size_t(e)], m = p.off[size_t(e) + 1] - r0;
  return {m,
          p.N,
          kHidden,
          false,
          true,
          p.at(p.dh, r0 * p.N),
          p.at(p.w, e * kHidden * p.N),
          p.at(p.dx, r0 * kHidden)};
}
Product tn(Problem& p, int64_t e) {
  const int64_t r0 = p.off[size_t(e)], rows = p.off[size_t(e) + 1] - r0;
  return {kHidden,
          rows,
          p.N,
          true,
          false,
          p.at(p.x, r0 * kHidden),
          p.at(p.dh, r0 * p.N),
          p.at(p.dw, e * kHidden * p.N)};
}
Product dense(Problem& p) {
  return {kLiveRows, kHidden, p.N, false, false, p.x.data(), p.w.data(), p.y.data()};
}

enum class Weights { as_stored, packed };  // how brgemm reads b

// brgemm matmuls per (shape, dtype, layouts); a runtime-dims matmul (gemm:jit) per (dtype, transposes).
struct Key {
  memory::dim m, k, n;
  Dtype dt;
  bool trans_a, trans_b;
  Weights b;
  auto operator<=>(const Key&) const = default;
};

const dnnl::matmul::primitive_desc& matmul_pd(const Key& key) {
  static std::map<Key, dnnl::matmul::primitive_desc> cache;
  auto it = cache.find(key);
  if (it == cache.end()) {
    const memory::desc b = key.b == Weights::packed
                               ? memory::desc({key.k, key.n}, dnnl_type(key.dt), Tag::any)
                               : matrix(key.k, key.n, key.dt, key.trans_b);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(matrix(key.m, key.k, key.dt, key.trans_a), b, matrix(key.m, key.n, key.dt, false)),
        engine());
    it = cache.emplace(key, pd).first;
  }
  return it->second;
}

void execute(const Key& key, const memory::desc& a, const void* ap, const memory::desc& b, const void* bp,
             const memory::desc& c, void* cp) {
  static std::map<Key, dnnl::matmul> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, dnnl::matmul(matmul_pd(key))).first;
  memory am(a, engine(), const_cast<void*>(ap)), bm(b, engine(), const_cast<void*>(bp)), cm(c, engine(), cp);
  it->second.execute(stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream().wait();
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

void* scratch(size_t bytes) {
  static Buffer<std::byte> buf;
  if (buf.size() < bytes) buf = Buffer<std::byte>(bytes);
  return buf.data();
}

void plain_b(Dtype dt, const Product& q) {
  const Key key{q.m, q.k, q.n, dt, q.trans_a, q.trans_b, Weights::as_stored};
  execute(key, matrix(q.m, q.k, dt, q.trans_a), q.a, matrix(q.k, q.n, dt, q.trans_b), q.b,
          matrix(q.m, q.n, dt, false), q.c);
}

// b reordered into brgemm's blocked layout first; with transpose_a, a is also made row-major first.
void pack_b(Dtype dt, const Product& q, bool transpose_a = false) {
  const bool trans_a = q.trans_a && !transpose_a;
  const Key key{q.m, q.k, q.n, dt, trans_a, false, Weights::packed};
  const memory::desc packed = matmul_pd(key).weights_desc();
  const size_t a_bytes = size_t(q.m * q.k) * dtype_size(dt);
  std::byte* buf = static_cast<std::byte*>(scratch(a_bytes + packed.get_size()));
  const void* a = q.a;
  if (transpose_a) {
    reorder(matrix(q.m, q.k, dt, true), q.a, matrix(q.m, q.k, dt, false), buf);
    a = buf;
  }
  reorder(matrix(q.k, q.n, dt, q.trans_b), q.b, packed, buf + a_bytes);
  execute(key, matrix(q.m, q.k, dt, trans_a), a, packed, buf + a_bytes, matrix(q.m, q.n, dt, false), q.c);
}

// b already in brgemm's blocked layout (q.b points at it).
void prepacked(Dtype dt, const Product& q) {
  const Key key{q.m, q.k, q.n, dt, q.trans_a, false, Weights::packed};
  execute(key, matrix(q.m, q.k, dt, q.trans_a), q.a, matmul_pd(key).weights_desc(), q.b,
          matrix(q.m, q.n, dt, false), q.c);
}

void gemm_jit(Dtype dt, const Product& q) {
  static std::map<std::tuple<Dtype, bool, bool>, dnnl::matmul> cache;
  auto it = cache.find({dt, q.trans_a, q.trans_b});
  if (it == cache.end()) {
    const memory::dim any = DNNL_RUNTIME_DIM_VAL;
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(matrix(any, any, dt, q.trans_a), matrix(any, any, dt, q.trans_b),
                           matrix(any, any, dt, false)),
        engine());
    MOE_CHECK(std::string(pd.impl_info_str()).starts_with("gemm:jit"), pd.impl_info_str());
    it = cache.emplace(std::make_tuple(dt, q.trans_a, q.trans_b), dnnl::matmul(pd)).first;
  }
  memory am(matrix(q.m, q.k, dt, q.trans_a), engine(), const_cast<void*>(q.a)),
      bm(matrix(q.k, q.n, dt, q.trans_b), engine(), const_cast<void*>(q.b)),
      cm(matrix(q.m, q.n, dt, false), engine(), q.c);
  it->second.execute(stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream().wait();
}

// w[e] (as nn's b) or w[e]^T (as nt's b) in brgemm's blocked layout, packed once per problem.
struct PackedWeights {
  size_t bytes;  // per expert
  Buffer<std::byte> data;
};

const PackedWeights& packed_weights(Problem& p, bool transposed) {
  static std::map<std::tuple<Dtype, int64_t, bool>, PackedWeights> cache;
  auto it = cache.find({p.dt, p.N, transposed});
  if (it != cache.end()) return it->second;
  const Product first = transposed ? nt(p, 0) : nn(p, 0);
  const memory::desc packed =
      matmul_pd({first.m, first.k, first.n, p.dt, false, false, Weights::packed}).weights_desc();
  for (int64_t e = 1; e < kExperts; ++e) {  // prepacking presumes one layout for every group size
    const Product q = transposed ? nt(p, e) : nn(p, e);
    MOE_CHECK(matmul_pd({q.m, q.k, q.n, p.dt, false, false, Weights::packed}).weights_desc() == packed,
              "brgemm's packed weight layout depends on M");
  }
  PackedWeights pw{packed.get_size(), Buffer<std::byte>(packed.get_size() * kExperts)};
  for (int64_t e = 0; e < kExperts; ++e)
    reorder(matrix(first.k, first.n, p.dt, transposed), p.at(p.w, e * kHidden * p.N), packed,
            pw.data.data() + pw.bytes * size_t(e));
  return cache.emplace(std::make_tuple(p.dt, p.N, transposed), std::move(pw)).first->second;
}

template <Product (*form)(Problem&, int64_t), void (*how)(Dtype, const Product&)>
void each_expert(Problem& p) {
  for (int64_t e = 0; e < kExperts; ++e) how(p.dt, form(p, e));
}

template <Product (*form)(Problem&, int64_t)>
void each_expert_prepacked(Problem& p) {
  const PackedWeights& pw = packed_weights(p, form == &nt);
  for (int64_t e = 0; e < kExperts; ++e) {
    Product q = form(p, e);
    q.b = pw.data.data() + pw.bytes * size_t(e);
    q.trans_b = false;
    prepacked(p.dt, q);
  }
}

void tn_transpose_a(Dtype dt, const Product& q) {
  pack_b(dt, q, true);
}
void pack_b_only(Dtype dt, const Product& q) {
  pack_b(dt, q);
}

}  // namespace direct
#endif

using Variant = void (*)(Problem&);

// The cpu backend's kernel table as the block gets it (MOE_GEMM_VARIANT picks --gemm-variant's name;
// MOE_TUNING_FILE as for moe-bench).
GemmKernels& kernels() {
  static GemmKernels table([] {
    KernelConfig k;
    if (const char* v = std::getenv("MOE_GEMM_VARIANT")) k.gemm_variant = v;
    return k;
  }());
  return table;
}

const std::pair<const char*, Variant> kVariants[] = {
    // The library, as the MoE block calls it. "dense" is the ceiling every ratio refers to.
    {"dense",
     [](Problem& p) {
       kernels().dense(p.y.data(), p.dt, p.x.data(), p.dt, p.w.data(), p.dt, kLiveRows, kHidden, p.N);
     }},
    {"nn",
     [](Problem& p) {
       kernels().nn(p.y.data(), p.dt, p.x.data(), p.w.data(), p.dt, p.groups(), kHidden, p.N);
     }},
    {"nt",
     [](Problem& p) {
       kernels().nt(p.dx.data(), p.dt, p.dh.data(), p.w.data(), p.dt, p.groups(), kHidden, p.N);
     }},
    {"tn",
     [](Problem& p) {
       kernels().tn(p.dw.data(), p.dt, p.x.data(), p.dh.data(), p.dt, p.groups(), kHidden, p.N, p.N);
     }},
    // The exact/ragged layout: the same rows without the padding to kTile (what padding costs).
    {"nn_ragged",
     [](Problem& p) {
       kernels().nn(p.y.data(), p.dt, p.x.data(), p.w.data(), p.dt, p.ragged_groups(), kHidden, p.N);
     }},
    {"nt_ragged",
     [](Problem& p) {
       kernels().nt(p.dx.data(), p.dt, p.dh.data(), p.w.data(), p.dt, p.ragged_groups(), kHidden, p.N);
     }},
    {"tn_ragged",
     [](Problem& p) {
       kernels().tn(p.dw.data(), p.dt, p.x.data(), p.dh.data(), p.dt, p.ragged_groups(), kHidden, p.N, p.N);
     }},
#ifdef MOE_HAVE_ONEDNN
    {"dense_plainB", [](Problem& p) { direct::plain_b(p.dt, direct::dense(p)); }},
    {"dense_packB", [](Problem& p) { direct::pack_b(p.dt, direct::dense(p)); }},
    {"dense_gemmjit", [](Problem& p) { direct::gemm_jit(p.dt, direct::dense(p)); }},
    {"nn_plainB", direct::each_expert<direct::nn, direct::plain_b>},
    {"nn_packB", direct::each_expert<direct::nn, direct::pack_b_only>},
    {"nn_prepacked", direct::each_expert_prepacked<direct::nn>},
    {"nn_gemmjit", direct::each_expert<direct::nn, direct::gemm_jit>},
    {"nt_plainB", direct::each_expert<direct::nt, direct::plain_b>},
    {"nt_packB", direct::each_expert<direct::nt, direct::pack_b_only>},
    {"nt_prepacked", direct::each_expert_prepacked<direct::nt>},
    {"nt_gemmjit", direct::each_expert<direct::nt, direct::gemm_jit>},
    {"tn_plainB", direct::each_expert<direct::tn, direct::plain_b>},
    {"tn_stridedA", direct::each_expert<direct::tn, direct::pack_b_only>},
    {"tn_transposeA", direct::each_expert<direct::tn, direct::tn_transpose_a>},
    {"tn_gemmjit", direct::each_expert<direct::tn, direct::gemm_jit>},
#endif
};

void run_variant(benchmark::State& state, Dtype dt, int64_t N, Variant variant) {
  Problem& p = problem(dt, N);
  // The first call builds and caches the primitives; later repetitions find them ready.
  static std::set<std::pair<const Problem*, Variant>> warm;
  if (warm.insert({&p, variant}).second) variant(p);
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
      const auto gflops = run.counters.find("GFLOP/s");  // the GEMMs' (bench_ops.cpp's ops have none)
      if (run.run_type != Run::RT_Iteration || run.error_occurred || gflops == run.counters.end()) continue;
      double& best = best_[run.run_name.function_name];
      best = std::max(best, double(gflops->second));
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
