#pragma once
// What the examples do first: ranks sharing a node share its cores. Each rank's BLAS and OpenMP get
// cores / local ranks threads (at least one), unless OMP_NUM_THREADS says otherwise:
// oversubscribed thread pools spin against each other and make every step many times slower.

#include <zero/comm/mpi_communicator.hpp>

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace examples {

// Returns the threads this rank uses.
inline int share_cores(zero::MpiCommunicator& world) {
  MPI_Comm node;
  MPI_Comm_split_type(world.native_handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL,
                      &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  int threads = std::max(1, int(std::thread::hardware_concurrency()) / local_ranks);
  if (const char* env = std::getenv("OMP_NUM_THREADS")) threads = std::max(1, std::atoi(env));
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  return threads;
}

} // namespace examples
