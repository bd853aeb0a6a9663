#include "moe/pack.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "moe/status.h"

namespace moe {
namespace {

// expert_score_sort's record, after the seed's lax.sort operands (expert, -top1 weight, a). That sort is
// keyed by expert only (lax.sort num_keys=1), so the score (the token's top-1 weight) rides along as
// payload and is never compared.
struct Record {
  int32_t expert;
  float score;
  int32_t a;
};

// Scratch the strategies reuse across calls, because packing runs in the timed region: once warm, only
// std::stable_sort's internal merge buffer is allocated per call. Per thread, so concurrent packs never
// share it.
struct PackScratch {
  std::vector<uint64_t> tuples;
  std::vector<Record> records;
  std::vector<int64_t> bin_start;
};

PackScratch& scratch() {
  thread_local PackScratch s;
  return s;
}

// sort_idx (A): stable comparison sort of flat indices keyed by ids (A).
void argsort_pack(int32_t* sort_idx, const int32_t* ids, int64_t A) {
  std::iota(sort_idx, sort_idx + A, 0);
  std::stable_sort(sort_idx, sort_idx + A, [ids](int32_t a, int32_t b) { return ids[a] < ids[b]; });
}

// sort_idx (A): unstable sort of (expert << 32 | a); keys are unique, so the result is the stable order.
void tuple_sort_pack(int32_t* sort_idx, const int32_t* ids, int64_t A, std::vector<uint64_t>& tuples) {
  tuples.resize(size_t(A));
  for (int64_t a = 0; a < A; ++a) tuples[size_t(a)] = uint64_t(uint32_t(ids[a])) << 32 | uint32_t(a);
  std::sort(tuples.begin(), tuples.end());
  for (int64_t i = 0; i < A; ++i) sort_idx[i] = int32_t(uint32_t(tuples[size_t(i)]));
}

// sort_idx (A): stable counting sort of (expert, score, a) records. ids (T*K), weights (T*K).
// Real experts get a bin each; null ids (unbounded values) share bin E and are then ordered by id.
void expert_score_pack(int32_t* sort_idx, const int32_t* ids, const float* weights, int64_t A, int64_t K,
                       int64_t E, PackScratch& s) {
  s.bin_start.assign(size_t(E + 2), 0);
  for (int64_t a = 0; a < A; ++a) ++s.bin_start[size_t(std::min<int64_t>(ids[a], E)) + 1];
  std::partial_sum(s.bin_start.begin(), s.bin_start.end(), s.bin_start.begin());
  const int64_t null_begin = s.bin_start[size_t(E)];
  s.records.resize(size_t(A));
  for (int64_t a = 0; a < A; ++a) {
    const size_t bin = size_t(std::min<int64_t>(ids[a], E));
    s.records[size_t(s.bin_start[bin]++)] = Record{ids[a], weights[a - a % K], int32_t(a)};
  }
  auto by_expert = [](const Record& x, const Record& y) { return x.expert < y.expert; };
  if (!std::is_sorted(s.records.begin() + null_begin, s.records.end(), by_expert))
    std::stable_sort(s.records.begin() + null_begin, s.records.end(), by_expert);
  for (int64_t i = 0; i < A; ++i) sort_idx[i] = s.records[size_t(i)].a;
}

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

void pack_assignments(Packed& out, const Routing& routing, PackStrategy strategy) {
  const int64_t A = routing.tokens * routing.topk, K = routing.topk, E = routing.experts;
  MOE_CHECK(int64_t(routing.ids.size()) == A && int64_t(routing.weights.size()) == A,
            "pack_assignments: routing ids/weights must be (T, K)");
  out.sort_idx.resize(size_t(A));
  out.token_idx_sort.resize(size_t(A));
  out.group_sizes.assign(size_t(E), 0);
  const int32_t* ids = routing.ids.data();
  switch (strategy) {
    case PackStrategy::argsort:
      argsort_pack(out.sort_idx.data(), ids, A);
      break;
    case PackStrategy::tuple_sort:
      tuple_sort_pack(out.sort_idx.data(), ids, A, scratch().tuples);
      break;
    case PackStrategy::expert_score_sort:
      expert_score_pack(out.sort_idx.data(), ids, routing.weights.data(), A, K, E, scratch());
      break;
  }
  for (int64_t i = 0; i < A; ++i) out.token_idx_sort[size_t(i)] = int32_t(out.sort_idx[size_t(i)] / K);
  for (int64_t a = 0; a < A; ++a)
    if (ids[a] < E) ++out.group_sizes[size_t(ids[a])];
}

void build_dispatch_plan(DispatchPlan& plan, const Packed& packed, const Routing& routing,
                         const MoeConfig& cfg, int64_t tile_rows) {
  const int64_t E = routing.experts, A = routing.tokens * routing.topk;
  MOE_CHECK(tile_rows >= 1, "build_dispatch_plan: tile_rows must be >= 1");
  MOE_CHECK(int64_t(packed.sort_idx.size()) == A && int64_t(packed.group_sizes.size()) == E,
            "build_dispatch_plan: packed does not match routing");
  // cfg supplies only the capacity rule and the run dtype; dimensions come from the routing.
  const int64_t cap = cfg.capacity();  // 0: no capacity
  const bool pad = cap > 0 && cfg.capacity_policy == CapacityPolicy::pad;
  const bool bf16_weights = cfg.dtype == Dtype::bf16;  // the seed casts sorted weights to x.dtype

  plan.tokens = routing.tokens;
  plan.topk = routing.topk;
  plan.experts = E;
  plan.group_offset.resize(size_t(E + 1));
  plan.group_offset[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t base = pad ? cap : packed.group_sizes[size_t(e)];
    plan.group_offset[size_t(e + 1)] = plan.group_offset[size_t(e)] + round_up(base, tile_rows);
  }
  plan.rows = plan.group_offset[size_t(E)];
  MOE_CHECK(plan.rows <= std::numeric_limits<int32_t>::max(), "build_dispatch_plan: row ids overflow int32");

  plan.row_assignment.assign(size_t(plan.rows), -1);
  plan.row_weight.assign(size_t(plan.rows), 0.0f);
  plan.assignment_row.assign(size_t(A), -1);
  plan.live_rows = 0;
  plan.dropped = 0;
  // Group e's assignments sit at sorted positions [start, start + count); rank j = position - start.
  // drop keeps the layout and leaves rows ranked >= cap as padding; pad has only cap base rows.
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t count = packed.group_sizes[size_t(e)];
    const int64_t kept = cap > 0 ? std::min(count, cap) : count;
    for (int64_t j = 0; j < kept; ++j) {
      const int32_t a = packed.sort_idx[size_t(start + j)];
      MOE_CHECK(routing.ids[size_t(a)] == e, "build_dispatch_plan: sort_idx is not grouped by expert");
      const int64_t row = plan.group_offset[size_t(e)] + j;
      const float w = routing.weights[size_t(a)];
      plan.row_assignment[size_t(row)] = a;
      plan.row_weight[size_t(row)] = bf16_weights ? round_to_bf16(w) : w;
      plan.assignment_row[size_t(a)] = int32_t(row);
    }
    plan.live_rows += kept;
    plan.dropped += count - kept;
    start += count;
  }
}

int64_t layout_tile_rows(BackendKind backend, int64_t gmm_tile_rows) {
  return backend == BackendKind::gmm ? gmm_tile_rows : 1;
}

}  // namespace moe
