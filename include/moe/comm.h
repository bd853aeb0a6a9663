// The only way code crosses processes (architecture.md): expert-parallel code calls a Comm, never MPI
// or NCCL directly. This session ships the single-process LocalComm; MPI and NCCL implementations
// slot in behind the same interface (src/comm/).
//
// Buffers are raw bytes with element counts per peer so one interface serves every dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/status.h"

namespace moe {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;
  // send_counts[p] / recv_counts[p] in bytes, packed back to back in peer order.
  virtual Status all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                              const std::vector<int64_t>& recv_bytes) = 0;
  // In-place float32 sum over all ranks.
  virtual Status all_reduce_sum(float* data, int64_t count) = 0;
  // recv (size * bytes) = concat over ranks of send (bytes).
  virtual Status all_gather(const void* send, int64_t bytes, void* recv) = 0;
  virtual Status barrier() = 0;
};

// One process: rank 0 of 1; every collective is a copy.
std::unique_ptr<Comm> make_local_comm();

}  // namespace moe
