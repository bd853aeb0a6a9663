// Row M of a register tile whose rows are `rb` elements apart, from three row pointers (p: row 0, q: row 5,
// r: row 10) and one and three rows' strides: x86 addresses base + index * 1, 2, 4 or 8, so 12 rows cost 5
// general registers and nothing spills from a tile's loop. Address arithmetic only, always inlined: the
// kernels of every ISA (dpbf16's, the int8 instances') include it.
#pragma once

#include <cstdint>

namespace moe::gemm_detail {

template <int M, class T>
[[gnu::always_inline]] inline const T* tile_row(const T* p, const T* q, const T* r, int64_t rb, int64_t rb3) {
  static_assert(M >= 0 && M < 15, "rows 0-14 from three pointers");
  if constexpr (M < 5) {
    if constexpr (M == 3) return p + rb3;
    return p + M * rb;  // 0, 1, 2, 4: base + index * scale
  } else if constexpr (M < 10) {
    if constexpr (M == 8) return q + rb3;
    return q + (M - 5) * rb;
  } else {
    return r + (M - 10) * rb;
  }
}

}  // namespace moe::gemm_detail
