// What every Comm implementation checks of a collective's arguments before anything moves (one
// place, so the local, thread and MPI comms refuse the same calls with the same words), and the f32
// staging of bf16 and f16 sums (summed in f32, rounded once).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/status.h"
#include "moe/tensor.h"

namespace moe::comm_detail {

// The sums (all_reduce_sum, reduce_scatter_sum) take float32, bfloat16 or float16 tensors.
Status check_reducible(const char* op, const Tensor& t);
// send and recv of one collective hold the same dtype.
Status check_same_dtype(const char* op, const Tensor& recv, const Tensor& send);
// all_gather: recv holds ranks * send.numel() elements.
Status check_gather(const Tensor& recv, const Tensor& send, int ranks);
// reduce_scatter_sum: send holds ranks * recv.numel() elements.
Status check_scatter(const Tensor& recv, const Tensor& send, int ranks);
// all_to_all_v: one count per rank, none negative, and the packed counts fit the buffers.
Status check_counts(const std::vector<int64_t>& recv_counts, const Tensor& recv,
                    const std::vector<int64_t>& send_counts, const Tensor& send, int ranks);

// Element offsets of counts packed in rank order: (ranks + 1) prefix sums.
std::vector<int64_t> prefix_offsets(const std::vector<int64_t>& counts);

// t (n) float32, bfloat16 or float16 -> f32 (n), and back (rounded to nearest even for bf16 and f16).
// Host memory.
std::vector<float> to_f32(const Tensor& t, int64_t offset, int64_t n);
void store_f32(Tensor& t, int64_t offset, const float* v, int64_t n);

}  // namespace moe::comm_detail
