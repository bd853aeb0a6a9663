// The only way code crosses processes (architecture.md): the block's exchange points (moe/exchange.h)
// call a Comm, never MPI or NCCL directly. Implementations (src/comm/):
//  - LocalComm: one process, rank 0 of 1; every collective is a copy (or nothing, in place);
//  - ThreadComm: R ranks as R threads of one process (make_thread_comms), so every comm path is
//    tested without mpirun; each collective meets all ranks at a barrier, reads the others' posted
//    buffers and agrees on errors (an argument error on one rank is returned on every rank);
//  - MpiComm: the processes of an MPI job (built when CMake finds MPI; world_comm() under mpirun).
//
// Buffers are Tensors, so a collective knows each buffer's dtype and memory (host, or a device that
// NCCL reads directly). Counts are in elements. Every rank calls every collective in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;

  // In place: data = the element-wise sum over ranks of data. f32 (summed in f32) or bf16 (summed in
  // f32 and rounded to bf16: once over two ranks; over more a comm may round its partial sums too, as
  // NCCL's bf16 all-reduce does and the MPI comm, whose bf16 travels as bf16, does).
  virtual Status all_reduce_sum(Tensor& data) = 0;
  // recv (size * n elements) = the ranks' send (n elements each) in rank order.
  virtual Status all_gather(Tensor& recv, const Tensor& send) = 0;
  // recv (n) = this rank's n-element slice of the element-wise sum over ranks of send (size * n);
  // f32 or bf16 as all_reduce_sum.
  virtual Status reduce_scatter_sum(Tensor& recv, const Tensor& send) = 0;
  // send_counts[p] elements go to rank p (packed in rank order from the start of send);
  // recv_counts[p] elements arrive from rank p (packed likewise into recv). send and recv may be
  // the same tensor when every element stays on its rank (the layout does not move).
  virtual Status all_to_all_v(Tensor& recv, const std::vector<int64_t>& recv_counts, const Tensor& send,
                              const std::vector<int64_t>& send_counts) = 0;
  virtual Status barrier() = 0;
  // The ranks that pass the same color form a new Comm, ordered by key then by rank (MPI_Comm_split):
  // a data x expert mesh is two splits of the world.
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;
  // Whether a thread other than the one that made the comm may call it (one thread at a time): an MPI
  // library below MPI_THREAD_SERIALIZED says no. --ep-overlap runs its collectives on a thread of their
  // own only where it may.
  virtual bool calls_from_any_thread() const { return true; }
  // Ends every rank of the job with `code` (MPI_Abort): for an error some ranks may not have seen, so
  // that none waits forever in a collective. One process: exits.
  [[noreturn]] virtual void abort(int code);
};

// One process: rank 0 of 1; every collective is a copy (or nothing, in place).
std::unique_ptr<Comm> make_local_comm();

// `ranks` ranks of one world in this process, to be driven by one thread each (rank i by comms[i]).
// A rank that waits over 120 s for the others at a collective is an invariant failure (a test that
// would hang aborts instead).
std::vector<std::unique_ptr<Comm>> make_thread_comms(int ranks);

// The process's world: the MPI job's when this process was started by an MPI launcher (mpirun, srun:
// their environment says so) and the build has MPI, else the local comm. Made on first use (MPI_Init);
// finalize_world_comm() ends it (MPI_Finalize), after every Comm split from it is gone.
Comm& world_comm();
void finalize_world_comm();
// Whether this build has MPI, and whether this process was started by an MPI launcher.
bool built_with_mpi();
bool launched_by_mpi();
// The number of processes the launcher says it started (1 without one), and this one's rank among
// them (0 without one): known before MPI starts (--help prints once, on rank 0).
int launched_world_size();
int launched_rank();

}  // namespace moe
