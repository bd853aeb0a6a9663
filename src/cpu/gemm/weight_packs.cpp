// cpu/gemm/gemm.h's WeightPacks and KeptWeightPacks: the packings of weights that stay unchanged across
// calls.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "cpu/gemm/gemm.h"
#include "moe/check.h"

namespace moe {

void WeightPacks::check_same(const void* rhs, int64_t E, int64_t Kd, int64_t N) const {
  MOE_CHECK(entries_.empty() || (rhs == rhs_ && E == E_ && Kd == Kd_ && N == N_),
            "WeightPacks: one object per weight tensor (another tensor or shape came with it)");
}

const uint8_t* WeightPacks::find(const std::string& layout, const void* rhs, int64_t E, int64_t Kd,
                                 int64_t N) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  check_same(rhs, E, Kd, N);
  for (const Entry& e : entries_)
    if (e.layout == layout) return e.storage.data();
  return nullptr;
}

uint8_t* WeightPacks::make(const std::string& layout, const void* rhs, int64_t E, int64_t Kd, int64_t N,
                           size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  check_same(rhs, E, Kd, N);
  for (const Entry& e : entries_) MOE_CHECK(e.layout != layout, "WeightPacks: a layout is packed once");
  rhs_ = rhs;
  E_ = E;
  Kd_ = Kd;
  N_ = N;
  Buffer<uint8_t> storage(bytes);  // the host allocator's: aligned, huge pages where the system allows
  std::memset(storage.data(), 0, bytes);
  entries_.push_back({layout, std::move(storage)});
  return entries_.back().storage.data();
}

WeightPacks* KeptWeightPacks::of(const Tensor& first, const Tensor& second) {
  if (!packs_ || first_.raw() != first.raw() || second_.raw() != second.raw()) {
    first_ = first;
    second_ = second;
    packs_ = std::make_unique<WeightPacks>();
  }
  return packs_.get();
}

}  // namespace moe
