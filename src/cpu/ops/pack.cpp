#include "cpu/ops/pack.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "moe/status.h"

namespace moe::cpu {
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

void pack_assignments(Packed& out, const RoutingView& routing, PackStrategy strategy) {
  const int64_t A = routing.tokens * routing.topk, K = routing.topk, E = routing.experts;
  out.sort_idx.resize(size_t(A));
  out.group_sizes.assign(size_t(E), 0);
  const int32_t* ids = routing.ids;
  switch (strategy) {
    case PackStrategy::argsort:
      argsort_pack(out.sort_idx.data(), ids, A);
      break;
    case PackStrategy::tuple_sort:
      tuple_sort_pack(out.sort_idx.data(), ids, A, scratch().tuples);
      break;
    case PackStrategy::expert_score_sort:
      expert_score_pack(out.sort_idx.data(), ids, routing.weights, A, K, E, scratch());
      break;
  }
  for (int64_t a = 0; a < A; ++a)
    if (ids[a] < E) ++out.group_sizes[size_t(ids[a])];
}

void build_dispatch_plan(DispatchPlan& plan, const Packed& packed, const RoutingView& routing,
                         const MoeConfig& cfg, int64_t tile_rows) {
  const int64_t E = routing.experts, A = routing.tokens * routing.topk;
  MOE_CHECK(tile_rows >= 1, "build_dispatch_plan: tile_rows must be >= 1");
  MOE_CHECK(int64_t(packed.sort_idx.size()) == A && int64_t(packed.group_sizes.size()) == E,
            "build_dispatch_plan: packed does not match routing");
  MOE_CHECK(plan.experts == E && plan.tokens == routing.tokens && plan.topk == routing.topk,
            "build_dispatch_plan: plan allocated for another shape");
  const int64_t cap = cfg.capacity();  // 0: no capacity
  const bool pad = cap > 0 && cfg.capacity_policy == CapacityPolicy::pad;
  const Dtype weight_dtype = cfg.dtype;

  int64_t* offset = plan.group_offset.data<int64_t>();
  offset[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t base = pad ? cap : packed.group_sizes[size_t(e)];
    offset[e + 1] = offset[e] + round_up(base, tile_rows);
  }
  const int64_t rows = offset[E];
  MOE_CHECK(rows <= plan.max_rows, "build_dispatch_plan: more rows than max_plan_rows allows");

  int32_t* row_assignment = plan.row_assignment.data<int32_t>();
  float* row_weight = plan.row_weight.data<float>();
  int32_t* assignment_row = plan.assignment_row.data<int32_t>();
  std::fill(row_assignment, row_assignment + rows, -1);
  std::fill(row_weight, row_weight + rows, 0.0f);
  std::fill(assignment_row, assignment_row + A, -1);
  int64_t* group_live = plan.group_live.data<int64_t>();
  int64_t live_rows = 0, dropped = 0;
  // Group e's assignments sit at sorted positions [start, start + count); rank j = position - start.
  // drop keeps the layout and leaves rows ranked >= cap as padding; pad has only cap base rows.
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t count = packed.group_sizes[size_t(e)];
    const int64_t kept = cap > 0 ? std::min(count, cap) : count;
    for (int64_t j = 0; j < kept; ++j) {
      const int32_t a = packed.sort_idx[size_t(start + j)];
      MOE_CHECK(routing.ids[a] == e, "build_dispatch_plan: sort_idx is not grouped by expert");
      const int64_t row = offset[e] + j;
      row_assignment[row] = a;
      row_weight[row] = float(round_to_dtype(routing.weights[a], weight_dtype));
      assignment_row[a] = int32_t(row);
    }
    group_live[e] = kept;
    live_rows += kept;
    dropped += count - kept;
    start += count;
  }
  int64_t* stats = plan.stats.data<int64_t>();
  stats[0] = rows;
  stats[1] = live_rows;
  stats[2] = dropped;
}

namespace {

class CpuPack final : public PackOp {
 public:
  explicit CpuPack(const OpContext& ctx) : cfg_(ctx.cfg), tile_rows_(ctx.tile_rows) {}

  void forward(DispatchPlan& plan, const RoutingTensors& routing) override {
    const RoutingView view = host_view(routing);
    pack_assignments(packed_, view, cfg_.pack_strategy);
    build_dispatch_plan(plan, packed_, view, cfg_, tile_rows_);
  }

 private:
  MoeConfig cfg_;
  int64_t tile_rows_;
  Packed packed_;  // reused across calls: once warm, packing allocates only std::stable_sort's buffer
};

}  // namespace

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx) {
  return std::make_unique<CpuPack>(ctx);
}

}  // namespace moe::cpu
