#pragma once
// Two measurements of the machine, taken before the sweep, that tell a slow launch apart from a
// slow collective (docs/collective-benchmark.md, "Launch to launch"):
//   - how fast each rank's core adds in-cache floats, all ranks at once (a co-tenant on the host,
//     a core shared with another job, a lower clock);
//   - the round trip of a cache line between rank 0 and each other rank through shared memory (on
//     these virtual machines it is 60-90 ns in some periods and 360-380 ns in others: where the
//     host runs the two virtual CPUs, which decides how fast every shared-memory pipeline can go).
// compare_backends.py reports both for every launch.

#include <zero/comm/progress/thread_work.hpp> // cpu_relax
#include <zero/comm/transport/host_reduce.hpp>

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <vector>

namespace bench {

struct CoreCheck {
  double min_gbps = 0; // the slowest rank's in-cache float sum
  double max_gbps = 0;
  double round_trip_ns = 0; // the slowest pair's (rank 0 with each other rank); 0 with one rank
};

namespace detail {

inline double in_cache_sum_gbps() {
  constexpr std::size_t n = 64 * 1024; // three 256 KiB streams: in L2
  constexpr int repeats = 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), sum(n);
  const float* sources[] = {a.data(), b.data()};
  double best = 0;
  for (int round = 0; round < 20; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r)
      zero::detail::reduce_sources<float>(sum.data(), std::span<const float* const>(sources), n,
                                          zero::ReduceOp::sum, 2);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 3.0 * n * sizeof(float) * repeats / seconds / 1e9);
  }
  return best;
}

// Waits for `ball` to hold `value` (or `stop`): spins, and yields once the peer looks descheduled
// (more ranks than cores, where spinning alone would wait for whole time slices).
inline std::uint64_t await_ball(const std::atomic<std::uint64_t>& ball, std::uint64_t value,
                                std::uint64_t stop) {
  for (unsigned spin = 0;; ++spin) {
    const std::uint64_t seen = ball.load(std::memory_order_acquire);
    if (seen == value || seen == stop) return seen;
    if (spin < 20000)
      zero::detail::cpu_relax();
    else
      sched_yield();
  }
}

// Rank 0 bounces a counter with each other rank on the node in turn: the best of five batches of
// up to 2000 round trips or 10 ms each.
inline double round_trip_ns(MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_ranks = 1;
  MPI_Comm_size(node, &node_ranks);
  double worst = 0;
  if (node_ranks == ranks && ranks > 1) {
    void* base = nullptr;
    MPI_Win window = MPI_WIN_NULL;
    MPI_Win_allocate_shared(rank == 0 ? 64 : 0, 1, MPI_INFO_NULL, node, &base, &window);
    MPI_Aint size = 0;
    int unit = 0;
    MPI_Win_shared_query(window, 0, &size, &unit, &base);
    auto* ball = static_cast<std::atomic<std::uint64_t>*>(base);
    if (rank == 0) new (ball) std::atomic<std::uint64_t>(0);
    constexpr std::uint64_t trips = 2000;
    constexpr std::uint64_t stop = ~std::uint64_t{0};
    for (int peer = 1; peer < ranks; ++peer) {
      double best = 1e30;
      for (int batch = 0; batch < 5; ++batch) {
        if (rank == 0) ball->store(0, std::memory_order_relaxed);
        MPI_Barrier(node);
        if (rank == 0) {
          const auto start = std::chrono::steady_clock::now();
          std::uint64_t done = 0;
          for (; done < trips; ++done) {
            ball->store(2 * done + 1, std::memory_order_release);
            await_ball(*ball, 2 * done + 2, stop);
            if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(10)) {
              ++done;
              break;
            }
          }
          ball->store(stop, std::memory_order_release);
          best = std::min(best, std::chrono::duration<double, std::nano>(
                                    std::chrono::steady_clock::now() - start)
                                        .count() /
                                    double(done));
        } else if (rank == peer) {
          for (std::uint64_t k = 0;; ++k) {
            if (await_ball(*ball, 2 * k + 1, stop) == stop) break;
            ball->store(2 * k + 2, std::memory_order_release);
          }
        }
        MPI_Barrier(node);
      }
      worst = std::max(worst, best);
    }
    MPI_Win_free(&window);
  }
  MPI_Comm_free(&node);
  return worst;
}

} // namespace detail

// Collective over `comm`; the result is valid on rank 0.
inline CoreCheck check_cores(MPI_Comm comm) {
  MPI_Barrier(comm);
  const double gbps = detail::in_cache_sum_gbps();
  CoreCheck check;
  MPI_Reduce(&gbps, &check.min_gbps, 1, MPI_DOUBLE, MPI_MIN, 0, comm);
  MPI_Reduce(&gbps, &check.max_gbps, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
  check.round_trip_ns = detail::round_trip_ns(comm);
  return check;
}

} // namespace bench
