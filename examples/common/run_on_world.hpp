#pragma once
// The main() of an example: makes the MPI world, runs the program on it, and reports an error as
// "program: what" with exit code 2. An error is reported while the communicator still exists. The
// library throws on every rank where it can tell (a rank whose swap directory failed tells the
// others); an error only one rank meets would leave its peers waiting in a collective, so with
// several ranks it ends the job.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/core/error.hpp>

#include <cstdio>
#include <string>

namespace examples {

// `train_on(world, argc, argv)` returns the exit code; `hint(what)` adds to an error's message
// (e.g. the flag that does what the message asks for).
template <class TrainOn, class Hint>
int run_on_world(const char* program, int argc, char** argv, TrainOn train_on, Hint hint) {
  try {
    zero::MpiCommunicator world(argc, argv);
    try {
      return train_on(world, argc, argv);
    } catch (const zero::Error& e) {
      std::fprintf(stderr, "%s: %s%s\n", program, e.what(), std::string(hint(e.what())).c_str());
      std::fflush(stderr);
      if (world.size() > 1) MPI_Abort(world.native_handle(), 2);
      return 2;
    }
  } catch (const zero::Error& e) { // the communicator itself failed
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
}

template <class TrainOn>
int run_on_world(const char* program, int argc, char** argv, TrainOn train_on) {
  return run_on_world(program, argc, argv, train_on, [](const char*) { return ""; });
}

} // namespace examples
