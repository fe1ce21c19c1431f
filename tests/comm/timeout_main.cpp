// Ranks that disagree about a collective. `skip`: rank 0 never calls the all_reduce the others
// call; with ZERO_TIMEOUT_S=2 the watchdog must abort the job, naming the op, its size and the
// rank. `mismatch`: rank 0 calls barrier() where the others call all_reduce; this must throw a
// mismatch error on every rank. `counts`: every rank calls the same reduce_scatter over blocks of
// different sizes, but rank 0 swaps the first two counts (the same total: only the counts differ);
// this too must throw a mismatch error. `exit`: rank 0 returns from main (its communicator and MPI
// closed as usual) instead of calling the all_reduce; the others must not wait for it forever.
// CTest checks the messages and a failing exit status (a mismatch error is caught and printed, so
// that the job ends with status 1 rather than an abort); without these mechanisms the program would
// hang or report success.

#include <zero/comm/mpi_communicator.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

int disagree(int argc, char** argv) {
  zero::MpiCommunicator comm(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "skip";
  std::vector<float> data(1000, 1.0f);
  if (mode == "counts") {
    std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()), 2);
    counts[comm.rank() == 0 ? 0 : 1] = 1;
    std::vector<float> block(counts[static_cast<std::size_t>(comm.rank())]);
    data.resize(2 * counts.size() - 1);
    comm.reduce_scatter(data, block, counts, zero::ReduceOp::sum).wait();
  } else if (comm.rank() != 0) {
    comm.all_reduce(data, zero::ReduceOp::sum).wait();
  } else if (mode == "mismatch") {
    comm.barrier();
  } else if (mode == "exit") {
    return 0;
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  std::printf("not reached: the collectives disagreed and nobody noticed\n");
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return disagree(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
