// The amx GEMM's tile layer (the interface cpu/amx_tiles.h documents) as plain C++: the same eight tile
// registers, 16 rows x 64 bytes each, held per thread in memory, and TDPBF16PS's arithmetic, so the
// kernel of cpu/gemm_amx_kernel.h runs on any CPU. The tests' instance (moe::amx_emulated, a test hook,
// not a variant); nothing of it is fast.
//
// TDPBF16PS as emulated: for each accumulator element (m, n),
//   acc[m][n] += float(a[m][2k]) * float(b[k][2n]) + float(a[m][2k + 1]) * float(b[k][2n + 1])
// over the 16 pair rows k of the B tile, in float32 (a bf16 product is exact in float32). The hardware
// also sums in float32 (denormal inputs read as zero), so the two differ only in the order and rounding
// of float32 additions, which the tests' tolerance covers.
#pragma once

#include <cstdint>
#include <cstring>

#include "moe/check.h"
#include "moe/dtype.h"

namespace moe::amx_emulated {

struct Tiles {
  static constexpr int kRows = 16, kBytes = 64;  // every tile of the kernel's palette
  // Registers: 0-3 the accumulators (a row block i, a column tile j: 2i + j), 4-5 A, 6-7 B.
  struct State {
    alignas(64) unsigned char tile[8][kRows * kBytes];
    bool configured = false;
  };
  static State& state() {
    static thread_local State s;
    return s;
  }

  static void configure() {
    state() = State{};  // LDTILECFG zeroes every tile
    state().configured = true;
  }
  static void release() { state().configured = false; }

  template <int I, int J>
  static void zero() {
    std::memset(reg(2 * I + J), 0, kRows * kBytes);
  }
  // A tile: 16 rows of 32 bf16, `stride` bytes apart.
  template <int I>
  static void load_a(const void* p, int64_t stride) {
    load(4 + I, p, stride);
  }
  // B tile: 16 pair rows of 16 columns x 2 bf16, `stride` bytes apart.
  template <int J>
  static void load_b(const void* p, int64_t stride) {
    load(6 + J, p, stride);
  }
  // accumulator (I, J) += A(I) B(J)
  template <int I, int J>
  static void dpbf16ps() {
    float* acc = reinterpret_cast<float*>(reg(2 * I + J));          // (16, 16)
    const bf16_t* a = reinterpret_cast<const bf16_t*>(reg(4 + I));  // (16, 32)
    const bf16_t* b = reinterpret_cast<const bf16_t*>(reg(6 + J));  // (16, 16, 2)
    for (int m = 0; m < kRows; ++m)
      for (int n = 0; n < 16; ++n) {
        float sum = acc[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          sum += bf16_to_f32(a[m * 32 + 2 * k]) * bf16_to_f32(b[k * 32 + 2 * n]) +
                 bf16_to_f32(a[m * 32 + 2 * k + 1]) * bf16_to_f32(b[k * 32 + 2 * n + 1]);
        acc[m * 16 + n] = sum;
      }
  }
  // Accumulator (I, J): 16 rows of 16 float32, `stride` bytes apart.
  template <int I, int J>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r)
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, reg(2 * I + J) + r * kBytes, kBytes);
  }

 private:
  static unsigned char* reg(int t) {
    MOE_CHECK(state().configured, "a tile used before the tile configuration was loaded");
    return state().tile[t];
  }
  static void load(int t, const void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r)
      std::memcpy(reg(t) + r * kBytes, static_cast<const unsigned char*>(p) + r * stride, kBytes);
  }
};

}  // namespace moe::amx_emulated
