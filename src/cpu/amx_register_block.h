// One register block of the amx kernels (cpu/gemm_amx_kernel.h: bf16, cpu/gemm_amx_s8_kernel.h: int8):
// 32 rows x 32 columns in the four accumulator tiles, fed by two A tiles (16 rows each) and two B tiles
// (16 columns each) per 64-byte chunk of the reduction (32 bf16 or 64 int8), written against either
// tile layer (cpu/amx_tiles.h documents it).
#pragma once

#include <cstdint>

namespace moe::amx {

enum class TileDot { bf16, s8 };  // TDPBF16PS (float32 sums) or TDPBSSD (int32 sums)

// accumulator (I, J) += A(I) B(J)
template <class Tiles, TileDot Dot, int I, int J>
void tile_dot() {
  if constexpr (Dot == TileDot::bf16)
    Tiles::template dpbf16ps<I, J>();
  else
    Tiles::template dpbssd<I, J>();
}

// acc (32, 32) of 4-byte sums = a (rows, `stride` bytes apart, 64 bytes a chunk) @ the B tiles b0 | b1
// (1 KiB a chunk each), over `chunks` chunks; the second row tile only when `rows` > 16 (acc's rows 16-31
// are then not written).
template <class Tiles, TileDot Dot>
void multiply_register_block(const char* a, int64_t stride, int64_t rows, const char* b0, const char* b1,
                             int64_t chunks, void* acc) {
  constexpr int64_t kChunkBytes = 64, kTileBytes = 16 * kChunkBytes, kAccRowBytes = 32 * 4;
  const bool two = rows > 16;
  Tiles::template zero<0, 0>();
  Tiles::template zero<0, 1>();
  Tiles::template zero<1, 0>();
  Tiles::template zero<1, 1>();
  for (int64_t kc = 0; kc < chunks; ++kc) {
    Tiles::template load_b<0>(b0 + kc * kTileBytes, kChunkBytes);
    Tiles::template load_b<1>(b1 + kc * kTileBytes, kChunkBytes);
    Tiles::template load_a<0>(a + kc * kChunkBytes, stride);
    tile_dot<Tiles, Dot, 0, 0>();
    tile_dot<Tiles, Dot, 0, 1>();
    if (two) {
      Tiles::template load_a<1>(a + 16 * stride + kc * kChunkBytes, stride);
      tile_dot<Tiles, Dot, 1, 0>();
      tile_dot<Tiles, Dot, 1, 1>();
    }
  }
  char* out = static_cast<char*>(acc);
  Tiles::template store<0, 0>(out, kAccRowBytes);
  Tiles::template store<0, 1>(out + kAccRowBytes / 2, kAccRowBytes);
  if (two) {
    Tiles::template store<1, 0>(out + 16 * kAccRowBytes, kAccRowBytes);
    Tiles::template store<1, 1>(out + 16 * kAccRowBytes + kAccRowBytes / 2, kAccRowBytes);
  }
}

}  // namespace moe::amx
