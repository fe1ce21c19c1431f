// Links zero::mpi from the installed package: MPI starts as a singleton without mpirun.
#include <zero/comm/mpi_communicator.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  zero::MpiCommunicator comm(argc, argv);
  std::vector<double> v(4, 1.0);
  comm.all_reduce(v, zero::ReduceOp::sum).wait();
  std::printf("consumer_mpi ok: %d rank(s), %g\n", comm.size(), v[0]);
  return v[0] == comm.size() ? 0 : 1;
}
