// zero/comm/detail/mpi_wait.hpp: the ranks that wait for a late peer outside the collective
// pipeline (communicator construction, splits, window creation) sleep between tests of their
// request instead of polling in Open MPI's wait, which with more ranks than cores yields the core
// at every poll and beside any busy process crawls (docs/communicators.md "When cores are shared").

#include <zero/comm/detail/mpi_wait.hpp>

#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct Comm {
  MPI_Comm handle = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  Comm() {
    MPI_Comm_dup(MPI_COMM_WORLD, &handle);
    MPI_Comm_rank(handle, &rank);
    MPI_Comm_size(handle, &size);
  }
  ~Comm() { MPI_Comm_free(&handle); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
};

double seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// What the calling thread used while it waited: its CPU time, and how often it gave up the core
// of its own accord (slept) rather than being preempted.
struct ThreadUsage {
  double cpu_seconds = 0;
  long voluntary_switches = 0;
  static ThreadUsage now() {
    rusage r{};
    getrusage(RUSAGE_THREAD, &r);
    return {seconds(CLOCK_THREAD_CPUTIME_ID), r.ru_nvcsw};
  }
  ThreadUsage operator-(const ThreadUsage& before) const {
    return {cpu_seconds - before.cpu_seconds, voluntary_switches - before.voluntary_switches};
  }
};

// The last rank arrives a second late; the others wait for it in arrive_together. They must not
// return before it arrived, and must sleep through the wait: a waiter that polls burns the second
// on its core (with as many ranks as cores, or beside nothing else), or, where Open MPI yields
// between polls, never blocks at all. Resource checks with generous bounds, not timings: a waiter
// that sleeps uses a few milliseconds of CPU and blocks hundreds of times, however loaded the
// machine (the late rank's second is real time whatever the load).
TEST(MpiWait, ALateRankIsWaitedForBySleeping) {
  Comm comm;
  ASSERT_GE(comm.size, 2) << "needs a late rank and a waiting one";
  const int late = comm.size - 1;
  const std::string_view what = "arriving in the test";
  int checks = 0;
  std::string checked;
  double arrived_at = 0;
  double returned_at = 0;
  ThreadUsage used;
  if (comm.rank == late) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    arrived_at = seconds(CLOCK_MONOTONIC); // one clock for every process of the machine
    zero::detail::arrive_together(comm.handle, what);
  } else {
    const ThreadUsage before = ThreadUsage::now();
    zero::detail::arrive_together(comm.handle, what, [&](std::string_view name, double waited) {
      ++checks;
      checked = name;
      EXPECT_GE(waited, 0.0);
    });
    used = ThreadUsage::now() - before;
    returned_at = seconds(CLOCK_MONOTONIC);
  }
  MPI_Bcast(&arrived_at, 1, MPI_DOUBLE, late, comm.handle);
  if (comm.rank == late) return;
  EXPECT_GE(returned_at, arrived_at) << "returned before the late rank arrived";
  EXPECT_LT(used.cpu_seconds, 0.25) << "the waiting thread polled instead of sleeping";
  EXPECT_GE(used.voluntary_switches, 10) << "the waiting thread never slept";
  EXPECT_GE(checks, 1) << "a wait of a second runs its check every "
                       << zero::detail::mpi_wait_check_period.count() << " ms";
  EXPECT_EQ(checked, what);
}

// wait_for completes a non-blocking call, whose results are then in place.
TEST(MpiWait, WaitForCompletesANonBlockingCall) {
  Comm comm;
  const std::int64_t mine = 100 + comm.rank;
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size), -1);
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(
      MPI_Iallgather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, comm.handle, &request),
      MPI_SUCCESS);
  zero::detail::wait_for(request, "gathering in the test");
  EXPECT_EQ(request, MPI_REQUEST_NULL);
  std::vector<std::int64_t> expected(all.size());
  std::iota(expected.begin(), expected.end(), std::int64_t{100});
  EXPECT_EQ(all, expected);
}

} // namespace
