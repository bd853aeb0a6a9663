// What the two amx kernels (cpu/gemm/amx/gemm_amx_kernel.h: bf16, cpu/gemm/amx/gemm_amx_s8_kernel.h: int8)
// share: their work list, one register block (32 rows x 32 columns in the four accumulator tiles, fed by two
// A tiles of 16 rows and two B tiles of 16 columns per 64-byte chunk of the reduction: 32 bf16 or 64 int8),
// written against either tile layer (cpu/gemm/amx/amx_tiles.h documents it), and the epilogue's store.
// Members of a class template on the tile layer, as the kernels are: the hardware instance (compiled for AMX)
// and the emulated one (the build's ISA) then share no function the linker could keep one copy of.
#pragma once

#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/ops/vec_math.h"
#include "moe/dtype.h"

namespace moe::amx {

enum class TileDot { bf16, s8 };  // TDPBF16PS (float32 sums) or TDPBSSD (int32 sums)

template <class Tiles>
struct AmxKernelParts {
  // Items (expert, column block, row block) of a grouped GEMM, expert-major: expert e's col_blocks x its
  // row blocks are [first[e], first[e + 1]). Every item is the same work (a small expert is few items, not a
  // slow one); threads take them by gemm_detail::WorkShares (a contiguous share each, then what others left).
  struct Items {
    std::vector<int64_t> first;  // (E + 1)
    int64_t col_blocks;

    // row_blocks(e): expert e's row blocks.
    template <class RowBlocks>
    Items(int64_t experts, int64_t col_blocks, RowBlocks row_blocks)
        : first(size_t(experts + 1), 0), col_blocks(col_blocks) {
      for (int64_t e = 0; e < experts; ++e)
        first[size_t(e + 1)] = first[size_t(e)] + col_blocks * row_blocks(e);
    }
    int64_t expert_of(int64_t item) const {
      return std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
    }
    int64_t row_blocks(int64_t e) const { return (first[size_t(e + 1)] - first[size_t(e)]) / col_blocks; }
  };

  // accumulator (I, J) += A(I) B(J)
  template <TileDot Dot, int I, int J>
  static void tile_dot() {
    if constexpr (Dot == TileDot::bf16)
      Tiles::template dpbf16ps<I, J>();
    else
      Tiles::template dpbssd<I, J>();
  }

  // Kept weights (a forward run's packing) stream from memory tile after tile, an item's four and then the
  // next item's, one run of addresses: the hardware's prefetchers alone read them at 0.75-0.92 of a
  // sequential read at one row an expert, 0.85-1.05 with these (AMX Xeon, 2 cores, moe_bench_few_rows 2 1 amx
  // 64); 4 and 8 chunks ahead, or into L2, no better. Prefetches never fault: past the last tile they are
  // dropped.
  static constexpr int64_t kPrefetchChunks = 2;

  // acc (32, 32) of 4-byte sums = a (rows, `stride` bytes apart, 64 bytes a chunk) @ the B tiles b0 | b1
  // (1 KiB a chunk each), over `chunks` chunks; the second row tile only when `rows` > 16 (acc's rows
  // 16-31 are then not written). from_memory: the B tiles stream from memory (kept weights), so they are
  // prefetched; a thread's own packing is in its L2, where the prefetches were most of tn's time at 8 rows.
  // between(kc) runs after chunk kc's products are issued: vector work independent of them (an earlier
  // block's epilogue) then runs while the tile unit multiplies, in place of after it.
  template <TileDot Dot, class Between>
  static void multiply(const void* a_rows, int64_t stride, int64_t rows, const void* b0_tiles,
                       const void* b1_tiles, int64_t chunks, bool from_memory, void* acc, Between between) {
    constexpr int64_t kChunkBytes = 64, kTileBytes = 16 * kChunkBytes, kAccRowBytes = 32 * 4;
    const char* a = static_cast<const char*>(a_rows);
    const char* b0 = static_cast<const char*>(b0_tiles);
    const char* b1 = static_cast<const char*>(b1_tiles);
    const bool two = rows > 16;
    Tiles::template zero<0, 0>();
    Tiles::template zero<0, 1>();
    Tiles::template zero<1, 0>();
    Tiles::template zero<1, 1>();
    for (int64_t kc = 0; kc < chunks; ++kc) {
      // The B tiles kPrefetchChunks ahead, into L1 (past a tile's last chunk, the next tile's first).
      for (int64_t line = 0; from_memory && line < kTileBytes; line += 64) {
        _mm_prefetch(b0 + (kc + kPrefetchChunks) * kTileBytes + line, _MM_HINT_T0);
        _mm_prefetch(b1 + (kc + kPrefetchChunks) * kTileBytes + line, _MM_HINT_T0);
      }
      Tiles::template load_b<0>(b0 + kc * kTileBytes, kChunkBytes);
      Tiles::template load_b<1>(b1 + kc * kTileBytes, kChunkBytes);
      Tiles::template load_a<0>(a + kc * kChunkBytes, stride);
      tile_dot<Dot, 0, 0>();
      tile_dot<Dot, 0, 1>();
      if (two) {
        Tiles::template load_a<1>(a + 16 * stride + kc * kChunkBytes, stride);
        tile_dot<Dot, 1, 0>();
        tile_dot<Dot, 1, 1>();
      }
      between(kc);
    }
    char* out = static_cast<char*>(acc);
    Tiles::template store<0, 0>(out, kAccRowBytes);
    Tiles::template store<0, 1>(out + kAccRowBytes / 2, kAccRowBytes);
    if (two) {
      Tiles::template store<1, 0>(out + 16 * kAccRowBytes, kAccRowBytes);
      Tiles::template store<1, 1>(out + 16 * kAccRowBytes + kAccRowBytes / 2, kAccRowBytes);
    }
  }

  // multiply, with rows [0, pending_rows) of an earlier register block's epilogue (epilogue(from, to))
  // spread over its chunks: vector work the core runs while its tile unit multiplies. After the products,
  // the same work took 22-25 % more time (AMX Xeon, nn_s8_swiglu and nn_s8 at issue 23's reference shape).
  template <TileDot Dot, class Epilogue>
  static void multiply_overlapped(const void* a_rows, int64_t stride, int64_t rows, const void* b0_tiles,
                                  const void* b1_tiles, int64_t chunks, bool from_memory, void* acc,
                                  int64_t pending_rows, Epilogue epilogue) {
    const int64_t per_chunk = chunks > 0 ? (pending_rows + chunks - 1) / chunks : 0;
    const auto rows_of = [&](int64_t from, int64_t to) {
      if (from < pending_rows) epilogue(from, std::min(pending_rows, to));
    };
    multiply<Dot>(a_rows, stride, rows, b0_tiles, b1_tiles, chunks, from_memory, acc,
                  [&](int64_t kc) { rows_of(kc * per_chunk, (kc + 1) * per_chunk); });
    rows_of(chunks * per_chunk, pending_rows);  // no chunks (an empty reduction): all of them
  }

#if defined(MOE_VEC_AVX512BF16)
  // The epilogues' vector stores, where the instance is compiled for AVX-512 BF16 (the hardware one always).
  // The first `count` of 16 lanes (none where count <= 0).
  static __mmask16 first_lanes(int64_t count) {
    return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
  }
  // 16 floats as bf16 (nearest even; a NaN quiet), as f32_to_bf16 rounds them.
  static __m256i bf16_words(__m512 v) {
    const __m256bh words = _mm512_cvtneps_pbh(v);
    return reinterpret_cast<const __m256i&>(words);
  }
  // v's lanes in mask to out as dt stores them, or added to a float32 out.
  static void store16(void* out, Dtype dt, __m512 v, __mmask16 mask, bool accumulate = false) {
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), v);
    if (dt == Dtype::bf16)
      _mm256_mask_storeu_epi16(out, mask, bf16_words(v));
    else
      _mm512_mask_storeu_ps(out, mask, v);
  }
  // 32 values (lo, hi) to a 64-byte aligned out (bf16 one line, float32 two), not read before: non-temporal.
  static void stream_line(void* out, Dtype dt, __m512 lo, __m512 hi) {
    if (dt == Dtype::bf16) {
      const __m512bh both = _mm512_cvtne2ps_pbh(hi, lo);  // lo's in the low half, nearest even
      _mm512_stream_si512(static_cast<__m512i*>(out), reinterpret_cast<const __m512i&>(both));
    } else {
      _mm512_stream_ps(static_cast<float*>(out), lo);
      _mm512_stream_ps(static_cast<float*>(out) + 16, hi);
    }
  }
#endif

  // An epilogue's result v for element i of out: added to a float32 out, or stored as dt (bf16: nearest
  // even).
  static void store_result(void* out, int64_t i, Dtype dt, float v, bool accumulate = false) {
    if (accumulate)
      static_cast<float*>(out)[i] += v;
    else if (dt == Dtype::bf16)
      static_cast<bf16_t*>(out)[i] = f32_to_bf16(v);
    else
      static_cast<float*>(out)[i] = v;
  }
};

}  // namespace moe::amx
