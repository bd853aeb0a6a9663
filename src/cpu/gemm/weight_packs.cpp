// cpu/gemm/gemm.h's S8WeightPacks: the packings of int8 weights that stay unchanged across calls.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "moe/check.h"

namespace moe {
namespace {

uint8_t* aligned64(std::vector<uint8_t>& bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data());
  return bytes.data() + ((64 - (p & 63)) & 63);
}

}  // namespace

void S8WeightPacks::check_same(const int8_t* rhs, int64_t E, int64_t Kd, int64_t N) const {
  MOE_CHECK(entries_.empty() || (rhs == rhs_ && E == E_ && Kd == Kd_ && N == N_),
            "S8WeightPacks: one object per weight tensor (another tensor or shape came with it)");
}

const uint8_t* S8WeightPacks::find(const std::string& layout, const int8_t* rhs, int64_t E, int64_t Kd,
                                   int64_t N) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  check_same(rhs, E, Kd, N);
  for (const Entry& e : entries_)
    if (e.layout == layout) return e.data;
  return nullptr;
}

uint8_t* S8WeightPacks::make(const std::string& layout, const int8_t* rhs, int64_t E, int64_t Kd, int64_t N,
                             size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  check_same(rhs, E, Kd, N);
  for (const Entry& e : entries_) MOE_CHECK(e.layout != layout, "S8WeightPacks: a layout is packed once");
  rhs_ = rhs;
  E_ = E;
  Kd_ = Kd;
  N_ = N;
  std::vector<uint8_t> storage(bytes + 64);
  uint8_t* data = aligned64(storage);
  entries_.push_back({layout, std::move(storage), data});
  return data;
}

}  // namespace moe
