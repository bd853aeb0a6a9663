// The entry points of our int8 kernel (cpu/gemm/gemm_s8.h): in the build's ISA, they check a call, write its
// padding rows, lay its work out (packing jobs, items) and hand it to an instance, whose file does the
// arithmetic in its own ISA.
//
// Work: items of (expert, up to kMaxItemRows rows, a block of tiles) that the threads take in turn, so small
// experts leave no thread idle. An item stages its rows of lhs once and runs them against each of its tiles;
// the expert's packed weights come from L3 (or memory) once per item. An item is all of its rows' tiles
// (nn_s8_swiglu's always: its epilogue quantizes whole rows of g) unless that leaves fewer than
// kItemsPerThread items a thread.
#include "cpu/gemm/gemm_s8.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "moe/tensor.h"

namespace moe::s8 {
namespace {

// Outputs from this size leave with non-temporal stores: each line of a tile's row would otherwise be
// fetched before it is overwritten, and those fetches held up the tiles' stores (16384 x 2048 x 1024 to
// bf16 on a 2-core Zen 4: 780 -> 857 GOP/s).
constexpr int64_t kStreamBytes = int64_t(2) << 20;
// Items a thread should have at least, so that the dynamic schedule evens out the threads' ends.
constexpr int64_t kItemsPerThread = 8;

// Quads of a packing job: 128 rows of an expert's weights.
constexpr int64_t kPackQuads = 32;
// Packing per call goes in phases of experts of about this much packing (two phases' stay in cache).
constexpr int64_t kPhaseBytes = int64_t(4) << 20;

// One calling thread's buffers, grown as needed and reused by its calls (ranks as threads call at once).
struct Scratch {
  std::vector<Item> items;
  std::vector<PackJob> pack_jobs;
  std::vector<int64_t> phase_experts;           // (phases + 1) expert bounds
  std::vector<size_t> phase_items, phase_jobs;  // (phases + 1) bounds in items and pack_jobs
  std::vector<int64_t> packed_at;
  std::vector<int32_t> correction;
  Buffer<std::byte> packed;
  Buffer<std::byte> stage;
  Buffer<std::byte> swiglu_stage;
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// The packing's name in a pack cache: the instance's, and the form's tile layout.
std::string layout_name(const Instance& inst, bool swiglu) {
  return std::string(inst.name) + (swiglu ? "/swiglu" : "/nn");
}

// Items of kMaxItemRows rows (the last fewer) that group e's live rows make.
int64_t row_items(GroupedShape groups, int64_t e) {
  return (gemm_detail::group_rows(groups, e).live + kMaxItemRows - 1) / kMaxItemRows;
}

// Expert e's packing in jobs of kPackQuads quads (of every tile).
void add_pack_jobs(Scratch& s, int64_t e, int64_t Kd) {
  const int64_t quads = (Kd + 3) / 4;
  for (int64_t q = 0; q < quads; q += kPackQuads)
    s.pack_jobs.push_back({e, q, std::min(quads, q + kPackQuads)});
}

// The call's phases as expert bounds (0, ..., E). Weights packed per call go phase by phase into two slots
// taken in turn, so that a phase's packing is read from cache by its items, not written to memory and read
// back (the seed's down projection on a 2-core Zen 4: 12-14 ms of packing in a 124 ms call, 14-19 ms in one
// phase). A phase is experts up to kPhaseBytes of packing (at least one), and for nn_s8_swiglu (whose items
// are whole rows) enough items for every thread. A pack cache's call is one phase.
std::vector<int64_t> phase_bounds(const Work& w, GroupedShape groups, int64_t expert_bytes) {
  if (w.in.rhs_packs) return {0, groups.experts};
  const int64_t min_items = w.swiglu ? 2 * omp_get_max_threads() : 1;
  std::vector<int64_t> bounds{0};
  int64_t bytes = 0, items = 0;
  for (int64_t e = 0; e < groups.experts; ++e) {
    if (gemm_detail::group_rows(groups, e).live == 0) continue;
    bytes += expert_bytes;
    items += row_items(groups, e);
    if (bytes + expert_bytes > kPhaseBytes && items >= min_items) {
      bounds.push_back(e + 1);
      bytes = items = 0;
    }
  }
  if (bounds.back() != groups.experts) bounds.push_back(groups.experts);
  return bounds;
}

// The items of experts [e0, e1): of up to kMaxItemRows rows and (nn_s8) of a block of tiles small enough that
// the threads have kItemsPerThread items each.
void add_items(Scratch& s, const Work& w, GroupedShape groups, int64_t e0, int64_t e1, int64_t tiles) {
  int64_t rows = 0;
  for (int64_t e = e0; e < e1; ++e) rows += row_items(groups, e);
  const int64_t wanted = kItemsPerThread * omp_get_max_threads();
  const int64_t blocks =
      w.swiglu ? 1 : std::clamp<int64_t>((wanted + rows - 1) / std::max<int64_t>(rows, 1), 1, tiles);
  const int64_t block_tiles = (tiles + blocks - 1) / blocks;
  for (int64_t e = e0; e < e1; ++e) {
    const gemm_detail::GroupRows g = gemm_detail::group_rows(groups, e);
    for (int64_t t = 0; t < tiles; t += block_tiles)
      for (int64_t r = 0; r < g.live; r += kMaxItemRows)
        s.items.push_back(
            {e, g.row0 + r, std::min(kMaxItemRows, g.live - r), t, std::min(block_tiles, tiles - t)});
  }
}

// Where the call's packed weights are: the pack cache's (packing every expert into it the first time), or
// this thread's scratch: two slots of a phase's packing taken in turn (packing the experts with live rows).
// Fills s.packed_at and the phases' pack jobs.
uint8_t* packed_weights(const Instance& inst, Scratch& s, const Work& w, GroupedShape groups, int64_t tiles) {
  const int64_t expert_bytes = tiles * inst.geometry.tile_bytes(w.Kd);
  const int64_t cols = w.swiglu ? 2 * w.swiglu->M : w.N;  // of the one tensor the packs are keyed by
  s.packed_at.assign(size_t(groups.experts), -1);
  s.pack_jobs.clear();
  s.phase_jobs.assign(1, 0);
  if (WeightPacks* packs = w.in.rhs_packs) {
    for (int64_t e = 0; e < groups.experts; ++e) s.packed_at[size_t(e)] = e * expert_bytes;
    const std::string layout = layout_name(inst, w.swiglu != nullptr);
    const uint8_t* found = packs->find(layout, w.in.rhs, groups.experts, w.Kd, cols);
    for (int64_t e = 0; e < groups.experts && !found; ++e) add_pack_jobs(s, e, w.Kd);
    s.phase_jobs.push_back(s.pack_jobs.size());
    if (found) return const_cast<uint8_t*>(found);  // read only
    return packs->make(layout, w.in.rhs, groups.experts, w.Kd, cols, size_t(groups.experts * expert_bytes));
  }
  const std::vector<int64_t>& bounds = s.phase_experts;
  int64_t slot_bytes = 0;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    int64_t bytes = 0;
    for (int64_t e = bounds[p]; e < bounds[p + 1]; ++e) {
      if (gemm_detail::group_rows(groups, e).live == 0) continue;
      s.packed_at[size_t(e)] = bytes;  // in its phase's slot, placed below
      bytes += expert_bytes;
      add_pack_jobs(s, e, w.Kd);
    }
    s.phase_jobs.push_back(s.pack_jobs.size());
    slot_bytes = std::max(slot_bytes, bytes);
  }
  for (size_t p = 1; p + 1 < bounds.size(); p += 2)
    for (int64_t e = bounds[p]; e < bounds[p + 1]; ++e)
      if (s.packed_at[size_t(e)] >= 0) s.packed_at[size_t(e)] += slot_bytes;
  const size_t bytes = size_t(slot_bytes) * (bounds.size() > 2 ? 2 : 1);
  if (s.packed.size() < bytes) s.packed = Buffer<std::byte>(bytes);
  return reinterpret_cast<uint8_t*>(s.packed.data());
}

// Lays out and runs `w` (its product and output set) over `tiles` tiles of every group's live rows.
void run(const Instance& inst, Work w, GroupedShape groups, int64_t tiles) {
  Scratch& s = scratch();
  s.phase_experts = phase_bounds(w, groups, tiles * inst.geometry.tile_bytes(w.Kd));
  s.items.clear();
  s.phase_items.assign(1, 0);
  for (size_t p = 0; p + 1 < s.phase_experts.size(); ++p) {
    add_items(s, w, groups, s.phase_experts[p], s.phase_experts[p + 1], tiles);
    s.phase_items.push_back(s.items.size());
  }
  if (s.items.empty()) return;
  w.tiles = tiles;
  w.packed = packed_weights(inst, s, w, groups, tiles);
  w.pack_jobs = s.pack_jobs.data();
  w.packed_at = s.packed_at.data();
  w.items = s.items.data();
  w.phase_items = s.phase_items.data();
  w.phase_jobs = s.phase_jobs.data();
  w.phases = s.phase_items.size() - 1;
  w.rows = groups.group_offset[groups.experts];
  if (s.correction.size() < size_t(w.rows)) s.correction.resize(size_t(w.rows));
  w.correction = s.correction.data();
  w.stage_bytes = stage_bytes(w.Kd);
  const int64_t stages = w.stage_bytes * omp_get_max_threads();
  if (s.stage.size() < size_t(stages)) s.stage = Buffer<std::byte>(size_t(stages));
  w.stage = reinterpret_cast<int8_t*>(s.stage.data());
  if (w.swiglu) {
    w.swiglu_stage_bytes = kMaxItemRows * 3 * w.swiglu->M * int64_t(dtype_size(w.out_dtype));
    const int64_t stages = w.swiglu_stage_bytes * omp_get_max_threads();
    if (s.swiglu_stage.size() < size_t(stages)) s.swiglu_stage = Buffer<std::byte>(size_t(stages));
    w.swiglu_stage = reinterpret_cast<char*>(s.swiglu_stage.data());
  }
  inst.run(w);
}

}  // namespace

void nn_s8_with(const Instance& inst, void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups,
                int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "nn_s8: float32 or bfloat16 out");
  MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "nn_s8: accumulates in a float32 out only");
  gemm_detail::check_groups(groups, Kd, N);
  for (int64_t e = 0; e < groups.experts && !accumulate; ++e)  // left alone when accumulating
    gemm_detail::zero_padding_rows(out, out_dtype, gemm_detail::group_rows(groups, e), N);
  Work w{};
  w.in = in;
  w.Kd = Kd;
  w.out = out;
  w.out_dtype = out_dtype;
  w.N = N;
  w.accumulate = accumulate;
  w.stream = groups.group_offset[groups.experts] * N * int64_t(dtype_size(out_dtype)) >= kStreamBytes;
  const int64_t per_tile = 2 * int64_t(inst.geometry.lanes);
  run(inst, w, groups, (N + per_tile - 1) / per_tile);
}

void nn_s8_swiglu_with(const Instance& inst, S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up,
                       GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight) {
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "nn_s8_swiglu: float32 or bfloat16 h and g");
  gemm_detail::check_groups(groups, Kd, 2 * M);
  gemm_detail::write_s8_swiglu_padding(out, out_dtype, groups, M);
  const Swiglu swiglu{out, row_weight, M, up};
  Work w{};
  w.in = in;
  w.Kd = Kd;
  w.out_dtype = out_dtype;
  w.swiglu = &swiglu;
  const int64_t lanes = inst.geometry.lanes;
  run(inst, w, groups, (M + lanes - 1) / lanes);
}

}  // namespace moe::s8
