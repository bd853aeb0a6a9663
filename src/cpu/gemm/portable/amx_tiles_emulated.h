// The amx GEMM's tile layer (the interface cpu/gemm/amx/amx_tiles.h documents) as plain C++: the same eight
// tile registers, 16 rows x 64 bytes each, held per thread in memory, and TDPBF16PS's arithmetic, so the
// kernel of cpu/gemm/amx/gemm_amx_kernel.h runs on any CPU. The tests' instance (moe::amx_emulated, a test
// hook, not a variant); nothing of it is fast.
//
// TDPBF16PS as emulated: for each accumulator element (m, n),
//   acc[m][n] += float(a[m][2k]) * float(b[k][2n]) + float(a[m][2k + 1]) * float(b[k][2n + 1])
// over the 16 pair rows k of the B tile, in float32 (a bf16 product is exact in float32). The hardware
// also sums in float32 (denormal inputs read as zero), so the two differ only in the order and rounding
// of float32 additions, which the tests' tolerance covers.
// TDPBSSD as emulated: acc[m][n] += the sum over the 16 quad rows k and i < 4 of a[m][4k + i] * b[k][4n + i],
// s8 products summed in int32 as the hardware does (wrapping past int32's range), so it is exact: the
// int8 kernel's emulated results equal the hardware's bit for bit.
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
  // accumulator (I, J) += A(I) B(J) as int8: A 16 rows of 64 s8, B 16 quad rows x 16 columns x 4 s8,
  // the accumulator 16 x 16 int32.
  template <int I, int J>
  static void dpbssd() {
    uint32_t* acc = reinterpret_cast<uint32_t*>(reg(2 * I + J));    // (16, 16): int32's bits, wrapping
    const int8_t* a = reinterpret_cast<const int8_t*>(reg(4 + I));  // (16, 64)
    const int8_t* b = reinterpret_cast<const int8_t*>(reg(6 + J));  // (16, 16, 4)
    for (int m = 0; m < kRows; ++m)
      for (int n = 0; n < 16; ++n) {
        uint32_t sum = acc[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          for (int i = 0; i < 4; ++i)
            sum += uint32_t(int32_t(a[m * 64 + 4 * k + i]) * int32_t(b[k * 64 + 4 * n + i]));
        acc[m * 16 + n] = sum;
      }
  }
  // Accumulator (I, J): 16 rows of 16 float32 (or int32), `stride` bytes apart.
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
