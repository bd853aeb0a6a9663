// The amx GEMM's tile layer on the hardware: AMX intrinsics. Include only after the AMX target pragma
// (src/cpu/gemm/amx/gemm_amx.cpp); cpu/gemm/portable/amx_tiles_emulated.h is the same interface in plain C++
// for the tests.
//
// The interface the kernel (cpu/gemm/amx/gemm_amx_kernel.h) is written against, its register use fixed here
// (tile numbers in brackets):
// clang-format off
//   configure() / release()   load the palette (all 8 tiles 16 rows x 64 bytes; zeroes them) / free it
//   zero<I, J>()              accumulator (I, J) = 0 [2I + J]: 16 x 16 float32
//   load_a<I>(p, stride)      A(I) = 16 rows of 32 bf16 [4 + I]
//   load_b<J>(p, stride)      B(J) = 16 pair rows x 16 columns x 2 bf16 (b packed as (K/2, N, 2)) [6 + J]
//   dpbf16ps<I, J>()          accumulator (I, J) += A(I) B(J) (TDPBF16PS)
//   store<I, J>(p, stride)    accumulator (I, J) -> 16 rows of 16 float32
// and the same registers as int8 (cpu/gemm/amx/gemm_amx_s8_kernel.h): A(I) 16 rows of 64 s8, B(J) 16 quad rows x 16
// columns x 4 s8 (b packed as (K/4, N, 4)), the accumulators 16 x 16 int32:
//   dpbssd<I, J>()            accumulator (I, J) += A(I) B(J) (TDPBSSD: s8 x s8, int32 sums)
// clang-format on
// Strides are in bytes. GCC's tile intrinsics are macros that paste the register number into the
// instruction text, so each register is named literally below.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace moe::cpu::isa_amx {

struct Tiles {
  // Palette 1, tiles 0-7 all 16 rows x 64 bytes.
  struct alignas(64) Config {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  };

  static void configure() {
    Config cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
  }
  static void release() { _tile_release(); }

  template <int I, int J>
  static void zero() {
    if constexpr (I == 0 && J == 0) _tile_zero(0);
    if constexpr (I == 0 && J == 1) _tile_zero(1);
    if constexpr (I == 1 && J == 0) _tile_zero(2);
    if constexpr (I == 1 && J == 1) _tile_zero(3);
  }
  // The intrinsics' asm takes the address without telling GCC that it reads memory: the barrier keeps
  // the stores that packed a panel or staged rows before the load.
  template <int I>
  static void load_a(const void* p, int64_t stride) {
    asm volatile("" ::: "memory");
    if constexpr (I == 0) _tile_loadd(4, p, stride);
    if constexpr (I == 1) _tile_loadd(5, p, stride);
  }
  template <int J>
  static void load_b(const void* p, int64_t stride) {
    asm volatile("" ::: "memory");
    if constexpr (J == 0) _tile_loadd(6, p, stride);
    if constexpr (J == 1) _tile_loadd(7, p, stride);
  }
  template <int I, int J>
  static void dpbf16ps() {
    if constexpr (I == 0 && J == 0) _tile_dpbf16ps(0, 4, 6);
    if constexpr (I == 0 && J == 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (I == 1 && J == 0) _tile_dpbf16ps(2, 5, 6);
    if constexpr (I == 1 && J == 1) _tile_dpbf16ps(3, 5, 7);
  }
  template <int I, int J>
  static void dpbssd() {
    if constexpr (I == 0 && J == 0) _tile_dpbssd(0, 4, 6);
    if constexpr (I == 0 && J == 1) _tile_dpbssd(1, 4, 7);
    if constexpr (I == 1 && J == 0) _tile_dpbssd(2, 5, 6);
    if constexpr (I == 1 && J == 1) _tile_dpbssd(3, 5, 7);
  }
  template <int I, int J>
  static void store(void* p, int64_t stride) {
    if constexpr (I == 0 && J == 0) _tile_stored(0, p, stride);
    if constexpr (I == 0 && J == 1) _tile_stored(1, p, stride);
    if constexpr (I == 1 && J == 0) _tile_stored(2, p, stride);
    if constexpr (I == 1 && J == 1) _tile_stored(3, p, stride);
  }
};

}  // namespace moe::cpu::isa_amx
