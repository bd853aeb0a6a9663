// The MPI world (src/comm/comm_mpi.cpp, built with MOE_HAVE_MPI only): MPI_Init on first use.
#pragma once

#include <memory>

#include "moe/comm.h"

namespace moe {

std::unique_ptr<Comm> make_mpi_world_comm();
void finalize_mpi();

}  // namespace moe
