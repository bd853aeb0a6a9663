// stream_zeros (cpu/gemm/zero_gradient.h): the shares together zero exactly the range, whatever its start's
// alignment and its length, and nothing beside it; zero_unreached_gradients zeroes the experts no row reached
// and leaves the others.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cpu/gemm/zero_gradient.h"

namespace moe::gemm_detail {
namespace {

TEST(ZeroGradient, SharesZeroExactlyTheRangeAtAnyAlignmentAndLength) {
  std::vector<unsigned char> buf(1024 + 128);
  for (size_t offset = 0; offset < 64; offset += 7)
    for (size_t bytes : {0, 1, 15, 63, 64, 65, 127, 200, 511, 1000})
      for (int shares : {1, 2, 3, 5}) {
        std::fill(buf.begin(), buf.end(), 0xAB);
        unsigned char* const start =
            reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64) +
            offset;
        for (int s = 0; s < shares; ++s) stream_zeros(start, bytes, s, shares);
        for (size_t i = 0; i < buf.size(); ++i) {
          const unsigned char* p = buf.data() + i;
          const bool inside = p >= start && p < start + bytes;
          ASSERT_EQ(*p, inside ? 0 : 0xAB)
              << "offset " << offset << ", " << bytes << " bytes, " << shares << " shares, byte " << i;
        }
      }
}

TEST(ZeroGradient, OnlyTheExpertsNoRowReachedAreZeroed) {
  const int64_t Kd = 3, N = 5;                              // an expert 15 floats: odd starts
  const std::vector<int64_t> offsets = {0, 2, 2, 3, 3, 3};  // experts 1, 3, 4 empty
  const GroupedShape groups{offsets.data(), 5};
  std::vector<float> drhs(size_t(5 * Kd * N), 7.0f);
  zero_unreached_gradients(drhs.data(), Dtype::f32, groups, Kd, N);
  for (int64_t e = 0; e < 5; ++e)
    for (int64_t i = 0; i < Kd * N; ++i)
      EXPECT_EQ(drhs[size_t(e * Kd * N + i)], (e == 1 || e >= 3) ? 0.0f : 7.0f) << "expert " << e;
}

}  // namespace
}  // namespace moe::gemm_detail
