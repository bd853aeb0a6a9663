// The weight gradient of an expert no row reached (cpu/gemm/gemm.h tn: a zero gradient), written with
// streaming stores: it is written once and not read back by the call, and a regular store reads each line in
// before writing it, so zeros went out at 27-36 GB/s against 48-85 GB/s streamed (2-core Zen 4, 400 MiB,
// both threads). At few tokens most experts get no row (Qwen3-30B-A3B at 8 tokens: 78 of 128), and their
// zeros were most of a forward_backward's gradient bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/grouped.h"
#include "moe/tensor.h"

namespace moe::gemm_detail {

// Share `share` of `shares` of the `bytes` at `p` (contiguous, in line-aligned pieces but at its ends) as
// zeros, streamed; fenced, so the stores are visible to a thread that synchronizes with this one after it.
void stream_zeros(void* p, size_t bytes, int share = 0, int shares = 1);

// drhs[e] (Kd, N) of every expert of `groups` with no live row as zeros, streamed: share `share` of
// `shares` (a thread's, inside a parallel region), or all of it by the process's threads (outside one).
void zero_unreached_share(void* drhs, Dtype dt, GroupedShape groups, int64_t Kd, int64_t N, int share,
                          int shares);
void zero_unreached_gradients(void* drhs, Dtype dt, GroupedShape groups, int64_t Kd, int64_t N);

}  // namespace moe::gemm_detail
