#pragma once
// How zero waits for Open MPI outside its collective pipeline: creating, duplicating and splitting
// communicators, the exchanges a communicator makes when it is built, creating and freeing its
// shared-memory window.
//
// Open MPI waits for a blocking call by polling, and with more ranks than cores (mpirun
// --oversubscribe sets mpi_yield_when_idle) it calls sched_yield between polls. Beside any other
// busy process (a niced build, a data loader) each yield hands that process the core: a rank that
// reaches MPI_Comm_split before its peers polls at a few percent of a core, and the peers it waits
// for crawl too (3 ranks on 2 cores beside two niced busy loops: the engine's tests 15-20 times
// slower than at 2 ranks). So such calls wait here instead: a non-blocking call (or a non-blocking
// barrier in front of a blocking one, so that it starts only when every rank has arrived) is tested
// with MPI_Test, first without pause and then between sleeps that grow to a millisecond, as the
// pipeline's peers sleep instead of yielding (transport/peer_signal.hpp). MPI_Test still runs Open
// MPI's progress, which yields once when nothing moved: once per look, no longer at every poll.
// Figures: docs/communicators.md "When cores are shared".

#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/progress/thread_work.hpp" // cpu_relax

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace zero::detail {

// Called about every mpi_wait_check_period while a wait lasts, with what is waited for and for how
// many seconds so far. A check that finds the wait hopeless (a peer that will never arrive) ends
// the job, as the watchdog does (MPI_Abort): it must not throw, since MPI cannot cancel a
// collective request and would go on writing into buffers the caller then frees.
using MpiWaitCheck = std::function<void(std::string_view what, double seconds)>;
inline constexpr std::chrono::milliseconds mpi_wait_check_period{250};

// How long a wait polls before it sleeps. Past it, the wait is for a rank that is late, and
// sleeps between tests: 50 us at first, doubling to a millisecond. Measured with 3 ranks on 2 cores
// beside two niced busy loops:
// - One exchange (a call's signature, a barrier): 1 ms. 2000 validated 1 KiB all_reduces took
//   62-376 us each in 8 runs (median 89) against 74-762 us (median 343) in Open MPI's wait.
// - Setting a communicator up: 10 ms. Its calls come in a row, each of several rounds, and Open
//   MPI advances a non-blocking collective only while its rank polls: ranks that slept after 1 ms
//   made each round wait for a sleeper to wake, and a split twice as slow as in Open MPI's wait
//   (median 22 ms against 11, every rank there); after 10 ms, 10.7 against 8.0.
inline constexpr std::chrono::microseconds mpi_wait_spin{1000};
inline constexpr std::chrono::microseconds mpi_setup_spin{10000};
inline constexpr std::chrono::microseconds mpi_wait_first_sleep{50};
inline constexpr std::chrono::microseconds mpi_wait_longest_sleep{1000};

// Returns once `request` has completed (it is then MPI_REQUEST_NULL); `what` names it for the
// check and for an error.
inline void wait_for(MPI_Request& request, std::string_view what, const MpiWaitCheck& check = {},
                     std::chrono::microseconds spin = mpi_wait_spin) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_check = start + mpi_wait_check_period;
  auto sleep = mpi_wait_first_sleep;
  for (;;) {
    int done = 0;
    const int status = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (status != MPI_SUCCESS)
      fail(ErrorKind::mpi,
           std::string(what) + ": " + MpiStatus::message(status, "MPI_Test", __FILE__, __LINE__));
    if (done != 0) return;
    const auto now = clock::now();
    if (now - start < spin) {
      cpu_relax();
      continue;
    }
    if (check && now >= next_check) {
      check(what, std::chrono::duration<double>(now - start).count());
      next_check = now + mpi_wait_check_period;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, mpi_wait_longest_sleep);
  }
}

// Returns once every rank of `comm` has called it: put in front of a blocking collective call, it
// makes that call start only when its peers are there to answer.
inline void arrive_together(MPI_Comm comm, std::string_view what, const MpiWaitCheck& check = {},
                            std::chrono::microseconds spin = mpi_wait_spin) {
  MPI_Request request = MPI_REQUEST_NULL;
  ZERO_CHECK_MPI(MPI_Ibarrier(comm, &request));
  wait_for(request, what, check, spin);
}

} // namespace zero::detail
