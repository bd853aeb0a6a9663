// Pack on the GPU: a stable radix sort of the assignments by expert (CUB; null ids sort after every
// expert and are dropped), a histogram, the group layout (tile padding, capacity drop and pad) from
// one thread (E is small), then each sorted assignment placed at its group's offset plus its rank.
// Everything stays on the device: the plan is never read back here. Reference: src/ref/pack.cpp.
#include <bit>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

constexpr int kThreads = 256;

// key[a] = min(id, E) (null ids become E), value[a] = a, count[e] += 1 for real ids.
__global__ void keys_and_counts(uint32_t* __restrict__ keys, int32_t* __restrict__ values,
                                unsigned long long* __restrict__ count, const int32_t* __restrict__ ids,
                                int64_t assignments, int64_t experts) {
  for (int64_t a = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; a < assignments;
       a += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = ids[a] < experts ? ids[a] : experts;
    keys[a] = uint32_t(e);
    values[a] = int32_t(a);
    if (e < experts) atomicAdd(count + e, 1ull);
  }
}

// group_offset, group_live, sorted_start (where expert e's assignments begin in sorted order) and
// stats, from the counts. One thread: E is at most a few thousand.
__global__ void lay_out_groups(int64_t* __restrict__ group_offset, int64_t* __restrict__ group_live,
                               int64_t* __restrict__ sorted_start, int64_t* __restrict__ stats,
                               const unsigned long long* __restrict__ count, int64_t experts, int64_t tile,
                               int64_t cap, bool pad) {
  int64_t offset = 0, sorted = 0, live = 0, dropped = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = int64_t(count[e]);
    const int64_t kept = cap > 0 && n > cap ? cap : n;
    group_offset[e] = offset;
    group_live[e] = kept;
    sorted_start[e] = sorted;
    const int64_t base = pad ? cap : n;
    offset += (base + tile - 1) / tile * tile;
    sorted += n;
    live += kept;
    dropped += n - kept;
  }
  group_offset[experts] = offset;
  stats[0] = offset;
  stats[1] = live;
  stats[2] = dropped;
}

// Every row padding and every assignment unplaced until placed.
__global__ void clear_plan(int32_t* __restrict__ row_assignment, float* __restrict__ row_weight,
                           int32_t* __restrict__ assignment_row, int64_t max_rows, int64_t assignments) {
  const int64_t n = max_rows > assignments ? max_rows : assignments;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < max_rows) {
      row_assignment[i] = -1;
      row_weight[i] = 0.0f;
    }
    if (i < assignments) assignment_row[i] = -1;
  }
}

// Sorted position i holds assignment a of expert e at rank i - sorted_start[e] within its group.
template <typename W>
__global__ void place(int32_t* __restrict__ row_assignment, float* __restrict__ row_weight,
                      int32_t* __restrict__ assignment_row, const uint32_t* __restrict__ sorted_keys,
                      const int32_t* __restrict__ sorted_values, const int64_t* __restrict__ group_offset,
                      const int64_t* __restrict__ sorted_start, const float* __restrict__ weights,
                      int64_t assignments, int64_t experts, int64_t cap) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < assignments;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = sorted_keys[i];
    if (e >= experts) continue;
    const int64_t rank = i - sorted_start[e];
    if (cap > 0 && rank >= cap) continue;
    const int32_t a = sorted_values[i];
    const int64_t row = group_offset[e] + rank;
    row_assignment[row] = a;
    // The combine weight in the run dtype, as every backend rounds it.
    W rounded;
    store(&rounded, weights[a]);
    row_weight[row] = to_float(rounded);
    assignment_row[a] = int32_t(row);
  }
}

class CudaPack final : public PackOp {
 public:
  explicit CudaPack(const OpContext& ctx)
      : dt_(ctx.cfg.dtype),
        tile_(ctx.tile_rows),
        cap_(ctx.cfg.capacity()),
        pad_(ctx.cfg.capacity() > 0 && ctx.cfg.capacity_policy == CapacityPolicy::pad),
        key_bits_(int(std::bit_width(uint64_t(ctx.cfg.experts)))) {
    Backend& be = ctx.backend;
    const int64_t A = ctx.cfg.assignments(), E = ctx.cfg.experts;
    count_ = be.empty(Dtype::s64, {E});
    sorted_start_ = be.empty(Dtype::s64, {E});
    keys_ = be.empty(Dtype::s32, {A});
    values_ = be.empty(Dtype::s32, {A});
    sorted_keys_ = be.empty(Dtype::s32, {A});
    sorted_values_ = be.empty(Dtype::s32, {A});
    size_t bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys(), sorted_keys(), values(),
                                               sorted_values(), A, 0, key_bits_, device().stream));
    sort_scratch_ = be.empty(Dtype::s8, {int64_t(bytes)});
  }

  void forward(DispatchPlan& plan, const RoutingTensors& routing) override {
    const int64_t A = routing.tokens * routing.topk, E = routing.experts;
    const cudaStream_t stream = device().stream;
    auto* counts = static_cast<unsigned long long*>(count_.raw());
    auto* group_offset = static_cast<int64_t*>(plan.group_offset.raw());
    auto* row_assignment = static_cast<int32_t*>(plan.row_assignment.raw());
    auto* row_weight = static_cast<float*>(plan.row_weight.raw());
    auto* assignment_row = static_cast<int32_t*>(plan.assignment_row.raw());
    count_.fill_zero();
    if (A > 0)
      keys_and_counts<<<grid_for(A), kThreads, 0, stream>>>(
          keys(), values(), counts, static_cast<const int32_t*>(routing.ids.raw()), A, E);
    CUDA_CHECK(cudaGetLastError());
    lay_out_groups<<<1, 1, 0, stream>>>(group_offset, static_cast<int64_t*>(plan.group_live.raw()),
                                        static_cast<int64_t*>(sorted_start_.raw()),
                                        static_cast<int64_t*>(plan.stats.raw()), counts, E, tile_, cap_,
                                        pad_);
    CUDA_CHECK(cudaGetLastError());
    if (std::max(plan.max_rows, A) > 0)
      clear_plan<<<grid_for(std::max(plan.max_rows, A)), kThreads, 0, stream>>>(
          row_assignment, row_weight, assignment_row, plan.max_rows, A);
    CUDA_CHECK(cudaGetLastError());
    if (A == 0) return;
    size_t bytes = size_t(sort_scratch_.numel());
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_scratch_.raw(), bytes, keys(), sorted_keys(), values(),
                                               sorted_values(), A, 0, key_bits_, stream));
    visit_float(dt_, "cuda pack", [&](auto tag) {
      using W = decltype(tag);
      place<W><<<grid_for(A), kThreads, 0, stream>>>(
          row_assignment, row_weight, assignment_row, sorted_keys(), sorted_values(), group_offset,
          static_cast<const int64_t*>(sorted_start_.raw()), static_cast<const float*>(routing.weights.raw()),
          A, E, cap_);
    });
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  uint32_t* keys() { return static_cast<uint32_t*>(keys_.raw()); }
  uint32_t* sorted_keys() { return static_cast<uint32_t*>(sorted_keys_.raw()); }
  int32_t* values() { return static_cast<int32_t*>(values_.raw()); }
  int32_t* sorted_values() { return static_cast<int32_t*>(sorted_values_.raw()); }

  Dtype dt_;
  int64_t tile_, cap_;
  bool pad_;
  int key_bits_;                        // keys are in [0, E]
  Tensor count_;                        // (E) u64 assignments per expert
  Tensor sorted_start_;                 // (E) s64 first sorted position of each expert
  Tensor keys_, values_;                // (A) u32 expert (E for null), s32 assignment
  Tensor sorted_keys_, sorted_values_;  // (A) the same, stably sorted by expert
  Tensor sort_scratch_;                 // CUB's temporary storage
};

}  // namespace

std::unique_ptr<PackOp> make_pack_op(const OpContext& ctx) {
  return std::make_unique<CudaPack>(ctx);
}

}  // namespace moe::cuda
