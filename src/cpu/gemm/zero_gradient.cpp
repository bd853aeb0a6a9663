#include "cpu/gemm/zero_gradient.h"

#include <emmintrin.h>  // SSE2: every x86-64 CPU; build-ISA code
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "cpu/gemm/gemm_variants.h"

namespace moe::gemm_detail {

void stream_zeros(void* p, size_t bytes, int share, int shares) {
  constexpr size_t kLine = 64;
  auto* const base = static_cast<std::byte*>(p);
  // The whole lines of the range go to the shares; the bytes before the first and after the last line
  // (regular stores) to the first and the last share.
  const size_t head = std::min(bytes, (kLine - reinterpret_cast<uintptr_t>(base) % kLine) % kLine);
  const size_t lines = (bytes - head) / kLine, tail = head + lines * kLine;
  if (share == 0) std::memset(base, 0, head);
  const size_t begin = head + lines * size_t(share) / size_t(shares) * kLine;
  const size_t end = head + lines * size_t(share + 1) / size_t(shares) * kLine;
  const __m128i zero = _mm_setzero_si128();
  for (size_t i = begin; i < end; i += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(base + i), zero);
  if (share + 1 == shares) std::memset(base + tail, 0, bytes - tail);
  _mm_sfence();
}

void zero_unreached_share(void* drhs, Dtype dt, GroupedShape groups, int64_t Kd, int64_t N, int share,
                          int shares) {
  const size_t bytes = size_t(Kd * N) * dtype_size(dt);
  for (int64_t e = 0; e < groups.experts && bytes > 0; ++e)
    if (group_rows(groups, e).live == 0) stream_zeros(at(drhs, e * Kd * N, dt), bytes, share, shares);
}

void zero_unreached_gradients(void* drhs, Dtype dt, GroupedShape groups, int64_t Kd, int64_t N) {
  bool any = false;
  for (int64_t e = 0; e < groups.experts && !any; ++e) any = group_rows(groups, e).live == 0;
  if (!any) return;
#pragma omp parallel
  zero_unreached_share(drhs, dt, groups, Kd, N, omp_get_thread_num(), omp_get_num_threads());
}

}  // namespace moe::gemm_detail
