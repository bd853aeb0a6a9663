// The process's world comm (moe/comm.h): MPI under an MPI launcher in a build with MPI, else local.
#include <algorithm>
#include <cstdlib>

#include "moe/comm.h"
#ifdef MOE_HAVE_MPI
#include "comm/comm_mpi.h"
#endif

namespace moe {
namespace {

std::unique_ptr<Comm>& world_slot() {
  static std::unique_ptr<Comm> world;
  return world;
}

}  // namespace

bool built_with_mpi() {
#ifdef MOE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  // OpenMPI's mpirun, PMIx launchers (OpenMPI 5, Slurm), PMI-1/2 launchers (MPICH's mpiexec, srun).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

int launched_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 1;
}

int launched_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::max(0, std::atoi(v));
  return 0;
}

Comm& world_comm() {
  std::unique_ptr<Comm>& world = world_slot();
  if (!world) {
#ifdef MOE_HAVE_MPI
    if (launched_by_mpi()) world = make_mpi_world_comm();
#endif
    if (!world) world = make_local_comm();
  }
  return *world;
}

void finalize_world_comm() {
  world_slot().reset();
#ifdef MOE_HAVE_MPI
  finalize_mpi();
#endif
}

}  // namespace moe
