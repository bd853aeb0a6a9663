#include "moe/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moe/null_routing.h"
#include "moe/rng.h"
#include "moe/status.h"

namespace moe {
namespace {

// Below this many logits a parallel region costs more than the work it shares.
constexpr int64_t kParallelMin = int64_t(1) << 15;

// Sequential uniforms from one key, for the inherently serial parts (the runs walk).
struct UniformStream {
  uint64_t key;
  uint64_t counter = 0;
  double next() { return random_uniform(key, counter++); }
};

// Geometric(p) on {1, 2, ...} by inversion: the number of trials up to the first success.
int64_t sample_geometric(UniformStream& rng, double p) {
  const double u = rng.next();
  const double l = std::ceil(std::log1p(-u) / std::log1p(-p));  // log1p: exact for tiny u and p
  return std::max<int64_t>(1, int64_t(l));
}

// logits (T, E): N(0, 1) per element.
void random_logits(float* logits, int64_t T, int64_t E, uint64_t key) {
  const int64_t n = T * E;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) logits[i] = float(random_normal(key, uint64_t(i)));
}

// assigned (T): the top-1 expert of each token. Runs of geometric length go to a least-loaded expert,
// never the previous run's expert unless it is the only least-loaded one (spec §2.2).
std::vector<int32_t> sample_runs(int64_t T, int64_t E, double run_alpha, uint64_t key) {
  const double mean_run = std::max(2.0, 1.0 / std::max(1e-6, 1.0 - run_alpha));
  const double p = std::min(0.9, std::max(0.01, 1.0 / mean_run));
  UniformStream rng{key};
  std::vector<int32_t> assigned(static_cast<size_t>(T));
  std::vector<int64_t> loads(size_t(E), 0);
  std::vector<int32_t> cand;
  cand.reserve(size_t(E));
  int32_t prev = -1;
  for (int64_t pos = 0; pos < T;) {
    const int64_t len = std::min(sample_geometric(rng, p), T - pos);
    const int64_t least = *std::min_element(loads.begin(), loads.end());
    cand.clear();
    for (int32_t e = 0; e < int32_t(E); ++e)
      if (loads[size_t(e)] == least) cand.push_back(e);
    if (cand.size() > 1) std::erase(cand, prev);
    const size_t pick = std::min(cand.size() - 1, size_t(rng.next() * double(cand.size())));
    const int32_t e = cand[pick];
    std::fill_n(assigned.begin() + pos, len, e);
    loads[size_t(e)] += len;
    prev = e;
    pos += len;
  }
  return assigned;
}

// logits (T, E): N(0, noise_scale) noise plus 6 at each token's run expert.
void runs_logits(float* logits, int64_t T, int64_t E, const MoeConfig& cfg, uint64_t key) {
  const std::vector<int32_t> assigned = sample_runs(T, E, cfg.run_alpha, key);
  const uint64_t noise_key = derive_key(key, 1);
  const double scale = cfg.run_noise_scale;
#pragma omp parallel for schedule(static) if (T * E >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    float* row = logits + t * E;
    for (int64_t e = 0; e < E; ++e) row[e] = float(scale * random_normal(noise_key, uint64_t(t * E + e)));
    row[assigned[size_t(t)]] += 6.0f;
  }
}

// Up to this K, a running insertion into the top-K list beats a selection algorithm: after the first
// few experts almost every logit fails one well-predicted compare against the current K-th.
constexpr int64_t kInsertionMaxK = 32;

// order (E): the first K entries become the top-K expert ids, in order (value desc, then index asc).
void select_topk(int32_t* order, const float* row, int64_t E, int64_t K) {
  if (K <= kInsertionMaxK) {
    int64_t n = 0;
    for (int32_t e = 0; e < int32_t(E); ++e) {
      const float v = row[e];
      if (n == K && !(v > row[order[K - 1]])) continue;  // an equal logit keeps the lower index
      int64_t j = n < K ? n++ : K - 1;
      for (; j > 0 && v > row[order[j - 1]]; --j) order[j] = order[j - 1];
      order[j] = e;
    }
    return;
  }
  std::iota(order, order + E, 0);
  auto before = [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::nth_element(order, order + K - 1, order + E, before);
  std::sort(order, order + K, before);
}

// Selects the K largest of row (E) into ids/weights (K); `order` (E) is scratch.
void topk_row(int32_t* ids, float* weights, const float* row, int32_t* order, int64_t E, int64_t K) {
  select_topk(order, row, E, K);
  const float top = row[order[0]];
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    ids[k] = order[k];
    weights[k] = std::exp(row[order[k]] - top);
    sum += weights[k];
  }
  for (int64_t k = 0; k < K; ++k) weights[k] /= sum;
}

// numpy.percentile(v, q) with the default linear interpolation; v is sorted ascending, non-empty.
double percentile_linear(const std::vector<int64_t>& v, double q) {
  const double pos = q / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return double(v[lo]) + (pos - double(lo)) * double(v[hi] - v[lo]);
}

}  // namespace

std::vector<float> sample_router_logits(const MoeConfig& cfg, Distribution dist, uint64_t key) {
  const int64_t T = cfg.tokens, E = cfg.experts;
  MOE_CHECK(T >= 0 && E >= 1, "sample_router_logits: needs tokens >= 0 and experts >= 1");
  std::vector<float> logits(static_cast<size_t>(T * E));
  switch (dist) {
    case Distribution::random:
      random_logits(logits.data(), T, E, key);
      break;
    case Distribution::runs:
      runs_logits(logits.data(), T, E, cfg, key);
      break;
  }
  return logits;
}

Routing route_topk(const std::vector<float>& logits, int64_t tokens, int64_t experts, int64_t topk) {
  MOE_CHECK(topk >= 1 && topk <= experts, "route_topk: topk must be in [1, experts]");
  MOE_CHECK(int64_t(logits.size()) == tokens * experts, "route_topk: logits must be (T, E)");
  Routing r{tokens, topk, experts, std::vector<int32_t>(size_t(tokens * topk)),
            std::vector<float>(size_t(tokens * topk))};
#pragma omp parallel if (tokens * experts >= kParallelMin)
  {
    std::vector<int32_t> order(static_cast<size_t>(experts));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      topk_row(r.ids.data() + t * topk, r.weights.data() + t * topk, logits.data() + t * experts,
               order.data(), experts, topk);
  }
  return r;
}

Routing route_softmax_topk(const std::vector<float>& logits, int64_t tokens, int64_t experts, int64_t topk,
                           bool renormalize) {
  // The ids are route_topk's: softmax is monotone, so the K largest probabilities are the K largest
  // logits, ties alike.
  Routing r = route_topk(logits, tokens, experts, topk);
#pragma omp parallel for schedule(static) if (tokens * experts >= kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * experts;
    const float top = row[r.ids[size_t(t * topk)]];
    float sum = 0.0f;
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(row[e] - top);
    float* w = r.weights.data() + t * topk;
    float kept = 0.0f;
    for (int64_t k = 0; k < topk; ++k) {
      w[k] = std::exp(row[r.ids[size_t(t * topk + k)]] - top) / sum;
      kept += w[k];
    }
    if (renormalize)
      for (int64_t k = 0; k < topk; ++k) w[k] /= kept;
  }
  return r;
}

uint64_t distribution_key(const MoeConfig& cfg) {
  // Keyed by the distribution itself, not its position in the run's list (the seed splits by position),
  // so a distribution routes identically whichever others run beside it.
  return derive_key(derive_key(cfg.seed, kStreamRoute), uint64_t(cfg.distribution));
}

Routing make_routing(const MoeConfig& cfg, NullRoutingStats* null_stats) {
  const uint64_t key = distribution_key(cfg);
  const std::vector<float> logits = sample_router_logits(cfg, cfg.distribution, key);
  Routing r = cfg.impl == Impl::ref_dp
                  ? route_softmax_topk(logits, cfg.tokens, cfg.experts, cfg.topk, cfg.renormalize_topk)
                  : route_topk(logits, cfg.tokens, cfg.experts, cfg.topk);
  NullRoutingStats stats = apply_null_routing(r, cfg.null_routing, key);
  if (null_stats) *null_stats = stats;
  return r;
}

Routing routing_from(int64_t tokens, int64_t topk, int64_t experts, std::vector<int32_t> ids,
                     std::vector<float> weights) {
  MOE_CHECK(tokens >= 0 && topk >= 1 && experts >= 1, "routing_from: bad dimensions");
  MOE_CHECK(int64_t(ids.size()) == tokens * topk, "routing_from: ids must be (T, K)");
  MOE_CHECK(int64_t(weights.size()) == tokens * topk, "routing_from: weights must be (T, K)");
  MOE_CHECK(std::all_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 0; }),
            "routing_from: expert ids must be >= 0");
  return Routing{tokens, topk, experts, std::move(ids), std::move(weights)};
}

RoutingTensors to_memory(const Routing& routing, MemorySpace& memory) {
  const int64_t T = routing.tokens, K = routing.topk;
  Tensor ids(Dtype::s32, {T, K}), weights(Dtype::f32, {T, K});
  std::copy(routing.ids.begin(), routing.ids.end(), ids.data<int32_t>());
  std::copy(routing.weights.begin(), routing.weights.end(), weights.data<float>());
  return RoutingTensors{T, K, routing.experts, ids.to_memory(memory), weights.to_memory(memory)};
}

RoutingView host_view(const Routing& routing) {
  return RoutingView{routing.tokens, routing.topk, routing.experts, routing.ids.data(),
                     routing.weights.data()};
}

RoutingView host_view(const RoutingTensors& routing) {
  return RoutingView{routing.tokens, routing.topk, routing.experts, routing.ids.data<int32_t>(),
                     routing.weights.data<float>()};
}

RunStats run_stats(const Routing& r) {
  std::vector<int64_t> lengths;
  for (int64_t t = 0; t < r.tokens;) {
    const int32_t id = r.ids[size_t(t * r.topk)];
    int64_t end = t + 1;
    while (end < r.tokens && r.ids[size_t(end * r.topk)] == id) ++end;
    lengths.push_back(end - t);
    t = end;
  }
  if (lengths.empty()) return {};
  std::sort(lengths.begin(), lengths.end());
  return RunStats{.runs = double(lengths.size()),
                  .mean = double(r.tokens) / double(lengths.size()),
                  .p95 = percentile_linear(lengths, 95.0),
                  .max = double(lengths.back())};
}

std::vector<int64_t> expert_counts(const Routing& r) {
  std::vector<int64_t> counts(size_t(r.experts), 0);
  for (int32_t id : r.ids)
    if (id < r.experts) ++counts[size_t(id)];
  return counts;
}

LoadStats load_stats(const Routing& r) {
  const std::vector<int64_t> counts = expert_counts(r);
  if (counts.empty()) return {};
  const double n = double(counts.size());
  const double mean = double(std::accumulate(counts.begin(), counts.end(), int64_t(0))) / n;
  double var = 0;
  for (int64_t c : counts) var += (double(c) - mean) * (double(c) - mean);
  const double sd = std::sqrt(var / n);
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  return LoadStats{.min = double(*lo), .max = double(*hi), .std = sd, .cv = mean > 0 ? sd / mean : 0.0};
}

}  // namespace moe
