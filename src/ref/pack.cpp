// Pack from its definition (spec §3.1): expert e's rows are its assignments in flat order a = t*K + k
// (a stable sort by expert), the first `cap` of them under capacity, each group padded to the tile;
// null ids (>= E) belong to no group.
#include <algorithm>

#include "moe/backend.h"
#include "ref/ref.h"

namespace moe::ref {
namespace {

class RefPack final : public PackOp {
 public:
  explicit RefPack(const OpContext& ctx) : cfg_(ctx.cfg), tile_rows_(ctx.tile_rows) {}

  void forward(DispatchPlan& plan, const RoutingTensors& routing) override {
    const int64_t E = routing.experts, A = routing.tokens * routing.topk, tile = tile_rows_;
    const int64_t cap = cfg_.capacity();
    const bool pad = cap > 0 && cfg_.capacity_policy == CapacityPolicy::pad;
    std::vector<int64_t> count(size_t(E), 0);
    for (int64_t a = 0; a < A; ++a) {
      const int64_t e = int64_t(routing.ids.get(a));
      if (e < E) ++count[size_t(e)];
    }
    plan.group_offset.set(0, 0);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t base = pad ? cap : count[size_t(e)];
      plan.group_offset.set(e + 1, plan.group_offset.get(e) + double((base + tile - 1) / tile * tile));
    }
    const int64_t rows = int64_t(plan.group_offset.get(E));
    for (int64_t r = 0; r < rows; ++r) {
      plan.row_assignment.set(r, -1);
      plan.row_weight.set(r, 0);
    }
    for (int64_t a = 0; a < A; ++a) plan.assignment_row.set(a, -1);
    int64_t live = 0, dropped = 0;
    for (int64_t e = 0; e < E; ++e) {
      int64_t rank = 0;
      for (int64_t a = 0; a < A; ++a) {
        if (int64_t(routing.ids.get(a)) != e) continue;
        if (cap > 0 && rank >= cap) {
          ++dropped;
          continue;
        }
        const int64_t row = int64_t(plan.group_offset.get(e)) + rank++;
        plan.row_assignment.set(row, double(a));
        plan.row_weight.set(row, round_to_dtype(routing.weights.get(a), cfg_.dtype));
        plan.assignment_row.set(a, double(row));
        ++live;
      }
      plan.group_live.set(e, double(rank));
    }
    plan.stats.set(0, double(rows));
    plan.stats.set(1, double(live));
    plan.stats.set(2, double(dropped));
  }

 private:
  MoeConfig cfg_;
  int64_t tile_rows_;
};

}  // namespace

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx) {
  return std::make_unique<RefPack>(ctx);
}

}  // namespace moe::ref
