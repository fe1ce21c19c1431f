// One rank of the job fails in the middle of a training step; check_rank_failure.py runs this under
// mpirun and checks that the others end quickly and say where they were, never hang.
//
//   rank_failure <kill|throw|leave|exit> <reduction|gather|update|finish> <stage 1|2|3>
//
// Rank 2 (the last rank with fewer than 3) fails at step 2: in backward right after handing over
// its last layer's gradients (its peers then wait in the gradient reduction), in forward before
// acquiring layer 2 (stage 3: its peers wait in that layer's all-gather), or as its optimizer
// update begins (its peers wait in the all-gather of the updated weights, stages 1/2), or
// (`finish`) after the last step, its engine still alive (its peers finish and tear down in order,
// and must not wait in a collective free for the rank that unwinds). `kill` is SIGKILL, a crash as
// the launcher sees it; `throw` is an error seen on that rank only (a bad input), which this
// program, as a careful trainer would, reports and turns into MPI_Abort; `leave` is the same error
// handled as most programs do: reported, and main returns 1 (the library must then end the job by
// itself); `exit` reports it and calls exit(1), which destroys no communicator.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

enum class Fault { kill, throw_error, leave, exit_process };
enum class Where { reduction, gather, update, finish };

int victim = 2;
constexpr int failing_step = 2;

struct Injection {
  Fault fault = Fault::kill;
  Where where = Where::reduction;
  int rank = 0;
  int step = 0;

  void maybe_fail(Where here) const {
    if (rank != victim || here != where || (here != Where::finish && step != failing_step)) return;
    static const char* const names[] = {"reduction", "gather", "update", "finish"};
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now); // the checker measures how long the job took to end
    std::fprintf(stderr, "rank %d: injecting a %s during the %s of step %d at monotonic %.3f\n",
                 rank, fault == Fault::kill ? "SIGKILL" : "throw", names[static_cast<int>(here)],
                 step, static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec));
    std::fflush(stderr);
    if (fault == Fault::kill) ::raise(SIGKILL);
    // The other faults throw; they differ in how main handles it.
    zero::fail(zero::ErrorKind::invalid_argument,
               "a bad input seen on rank " + std::to_string(rank) + " only");
  }
};

Injection injection;

// Adam whose update can fail: the engine calls begin_step() once per step, on every rank, before
// the fused update of this rank's shard.
class FailingAdam : public zero::Adam {
 public:
  using zero::Adam::Adam;
  update_type begin_step() {
    injection.maybe_fail(Where::update);
    return zero::Adam::begin_step();
  }
};

template <class Stage>
void train(zero::MpiCommunicator& world) {
  std::vector<zero::ParameterSpec> model;
  for (int l = 0; l < 6; ++l)
    model.push_back(
        {"layer" + std::to_string(l), 4096 + 64 * std::size_t(l), zero::DType::float32, l});
  zero::EngineOptions options;
  options.reduce_bucket_elements = 2048;
  options.prefetch_elements = 4096;
  zero::Engine<Stage, zero::MpiCommunicator, zero::host, FailingAdam, zero::StaticLossScaler>
      engine(world, model, FailingAdam({.lr = 1e-3}), zero::StaticLossScaler{}, options);
  for (injection.step = 0; injection.step < 5; ++injection.step) {
    for (std::size_t l = 0; l < engine.layers(); ++l) {
      if (l == 2) injection.maybe_fail(Where::gather);
      (void)engine.acquire(l);
    }
    for (std::size_t l = engine.layers(); l-- > 0;) {
      auto weights = engine.acquire(l);
      auto grads = engine.template gradients<float>(l);
      const auto w = weights.template values<float>();
      for (std::size_t i = 0; i < grads.size(); ++i)
        grads[i] = 0.01f * w[i] + 0.001f * float(world.rank() + 1);
      engine.grads_ready(l);
      if (l + 1 == engine.layers()) injection.maybe_fail(Where::reduction);
    }
    engine.step();
  }
  injection.maybe_fail(Where::finish);
}

} // namespace

// mpirun stops forwarding a rank's output once it ends the job, so a survivor's last words could be
// lost on the way; with RANK_FAILURE_LOG_DIR set, each rank writes its stderr to its own file.
void log_to_file(int rank) {
  const char* dir = std::getenv("RANK_FAILURE_LOG_DIR");
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/rank-" + std::to_string(rank) + ".log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
}

int main(int argc, char** argv) {
  zero::MpiCommunicator world(argc, argv);
  injection.rank = world.rank();
  victim = std::min(2, world.size() - 1);
  log_to_file(world.rank());
  try {
    zero::require(argc == 4,
                  "usage: rank_failure <kill|throw|leave|exit> <reduction|gather|update|finish> "
                  "<stage>");
    const std::string fault = argv[1], where = argv[2], stage = argv[3];
    injection.fault = fault == "kill"    ? Fault::kill
                      : fault == "leave" ? Fault::leave
                      : fault == "exit"  ? Fault::exit_process
                                         : Fault::throw_error;
    injection.where = where == "reduction" ? Where::reduction
                      : where == "gather"  ? Where::gather
                      : where == "update"  ? Where::update
                                           : Where::finish;
    zero::require(fault == "kill" || fault == "throw" || fault == "leave" || fault == "exit",
                  "unknown fault " + fault);
    zero::require(where == "reduction" || where == "gather" || where == "update" ||
                      where == "finish",
                  "unknown place " + where);
    if (stage == "1")
      train<zero::Stage<1>>(world);
    else if (stage == "2")
      train<zero::Stage<2>>(world);
    else
      train<zero::Stage<3>>(world);
    std::fprintf(stderr, "rank %d: finished without a failure\n", world.rank());
    return 0;
  } catch (const std::exception& e) {
    // As a trainer should: say what failed here, then end the job so no peer waits for this rank.
    std::fprintf(stderr, "rank %d of %d failed: %s\n", world.rank(), world.size(), e.what());
    std::fflush(stderr);
    if (injection.fault == Fault::leave) return 1; // as most programs do
    if (injection.fault == Fault::exit_process) std::exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
