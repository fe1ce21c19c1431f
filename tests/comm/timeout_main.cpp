// Ranks that disagree about a collective. `skip`: rank 0 never calls the all_reduce the others
// call; with ZERO_TIMEOUT_S=2 the watchdog must abort the job, naming the op, its size and the
// rank. `mismatch`: rank 0 calls barrier() where the others call all_reduce; this must throw a
// mismatch error on every rank. CTest checks the messages; without these mechanisms the program
// would hang or report success.

#include <zero/comm/mpi_communicator.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  zero::MpiCommunicator comm(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "skip";
  std::vector<float> data(1000, 1.0f);
  if (comm.rank() != 0) {
    comm.all_reduce(data, zero::ReduceOp::sum).wait();
  } else if (mode == "mismatch") {
    comm.barrier();
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  std::printf("not reached: the collectives disagreed and nobody noticed\n");
  return 0;
}
