#include "cpu/ops/transpose_s8.h"

#include <emmintrin.h>
#include <omp.h>

#include <algorithm>

namespace moe::cpu {
namespace {

constexpr int64_t kTile = 16;   // bytes of an SSE2 register: a 16 x 16 tile transposes in registers
constexpr int64_t kBlock = 64;  // a task's block: its 64 source rows' and 64 destination rows' lines in L1

// d (16 rows, ld_d apart) = s (16 rows, ld_s apart)^T. Four rounds of byte interleaves, each pairing
// register i with i + 8: a round rotates the 8 bits (register index, byte index) of every byte's place
// left by one, so four swap the two halves, which is the transpose.
void transpose_tile(int8_t* d, int64_t ld_d, const int8_t* s, int64_t ld_s) {
  __m128i x[kTile];
  for (int64_t i = 0; i < kTile; ++i) x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ld_s));
  for (int round = 0; round < 4; ++round) {
    __m128i y[kTile];
    for (int64_t i = 0; i < kTile / 2; ++i) {
      y[2 * i] = _mm_unpacklo_epi8(x[i], x[i + kTile / 2]);
      y[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + kTile / 2]);
    }
    std::copy(y, y + kTile, x);
  }
  for (int64_t i = 0; i < kTile; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i * ld_d), x[i]);
}

// dst (cols, rows) rows [c0, c1) x columns [r0, r1) = src (rows, cols) rows [r0, r1) x columns [c0, c1).
void transpose_block(int8_t* dst, const int8_t* src, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                     int64_t c0, int64_t c1) {
  int64_t r = r0;
  for (; r + kTile <= r1; r += kTile) {
    int64_t c = c0;
    for (; c + kTile <= c1; c += kTile) transpose_tile(dst + c * rows + r, rows, src + r * cols + c, cols);
    for (; c < c1; ++c)
      for (int64_t i = r; i < r + kTile; ++i) dst[c * rows + i] = src[i * cols + c];
  }
  for (; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
}

}  // namespace

void transpose_s8(int8_t* dst, const int8_t* src, int64_t experts, int64_t rows, int64_t cols) {
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t rb = 0; rb < row_blocks; ++rb)
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        const int64_t r0 = rb * kBlock, c0 = cb * kBlock;
        transpose_block(dst + e * rows * cols, src + e * rows * cols, rows, cols, r0,
                        std::min(rows, r0 + kBlock), c0, std::min(cols, c0 + kBlock));
      }
}

}  // namespace moe::cpu
