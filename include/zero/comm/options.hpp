#pragma once
// Run-time settings of the host communicators, from code or from the environment:
//   ZERO_VALIDATE=1        compare every collective's arguments across ranks first (default: on in
//                          debug builds, off with NDEBUG); a mismatch throws on every rank. Off,
//                          mismatches still throw: the shared-memory transport compares the
//                          calls at every phase, and the MPI transport always compares them.
//   ZERO_TIMEOUT_S=300     abort the job, naming the op, when a collective runs longer than this.
//   ZERO_MPI_TRANSPORT=auto|shm|mpi|hierarchical   shared-memory windows (all ranks on one node),
//                          chunked MPI, or two-level MPI (within each node, then across nodes).
//                          auto: shm on one node, else hierarchical where the nodes hold equally
//                          many ranks and mpi where they do not (hierarchical falls back alike).
//   ZERO_NODE_SIZE=k       cut every node into simulated nodes of k consecutive ranks of
//                          MPI_COMM_WORLD (to run the across-nodes paths on one machine, in
//                          tests); 0: the nodes MPI reports.
//   ZERO_CHUNK_BYTES=...   pipeline chunk of every transport (shared memory uses two per rank);
//                          unset or 0: 1 MiB for shared memory, 2 MiB for the MPI transports.
//   ZERO_NATIVE_GATHERS=1  on one node, all_gather and broadcast of at least
//                          ZERO_NATIVE_GATHERS_FROM_BYTES (default 1 MiB) use Open MPI's own
//                          calls, whose single-copy transfers beat staging through shared memory
//                          on large messages (no arithmetic, so nothing about determinism
//                          changes); 0 keeps every gather on the pipeline.
//   ZERO_NATIVE_BELOW_BYTES=0   2-rank all_reduce of non-half types below this size uses Open MPI's
//                          own call (bit-identical for 2 ranks), and so does a 2-rank
//                          reduce_scatter below the smaller of this and 128 KiB; 0 (the default,
//                          measured: the pipeline is faster at every size) never.
//   ZERO_NATIVE_WHEN_OVERSUBSCRIBED=0   with more ranks than the node has cores, no call goes to
//                          Open MPI's own (their spinning waits collapse there); 1 keeps the two
//                          settings above in force anyway.
//   ZERO_INLINE_BELOW_BYTES=4194304  a collective smaller than this that finds the progress thread
//                          idle runs on the calling thread instead (the same code, so the same bits
//                          and checks; the call returns complete); 0 never.

#include "zero/core/environment.hpp"
#include "zero/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero {

enum class Transport { automatic, shared_memory, mpi, hierarchical };

// Default pipeline chunks. Shared memory stages every chunk through the window, so a chunk that
// stays in cache wins. The MPI transports wait for every chunk's exchange before the next, yet
// across a network small chunks won: on the two-node test cluster (2 x 2 ranks, docs/multinode.md)
// 0.5-2 MiB chunks carried all-gathers, reduce-scatters and all-reduces of 16-256 MB at 0.95 of a
// 1 Gbit/s link, 4 MiB at 0.8 and 16 MiB at 0.6 (Open MPI's TCP transport moves messages of 1 MB
// and more at a lower rate; turning off its RDMA pipeline did not help, smaller RDMA fragments
// helped half-way). At 10 Gbit/s, where the cores are the limit, 2 MiB was 1.4-1.8x faster.
inline constexpr std::size_t shm_chunk_bytes = std::size_t{1} << 20;
inline constexpr std::size_t network_chunk_bytes = std::size_t{2} << 20;

constexpr const char* to_string(Transport t) noexcept {
  switch (t) {
  case Transport::automatic:
    return "auto";
  case Transport::shared_memory:
    return "shm";
  case Transport::mpi:
    return "mpi";
  case Transport::hierarchical:
    return "hierarchical";
  }
  return "?";
}

struct CommOptions {
#ifdef NDEBUG
  bool validate = false;
#else
  bool validate = true;
#endif
  double timeout_seconds = 300;
  Transport transport = Transport::automatic;
  // 0: the transport's own default, shm_chunk_bytes or network_chunk_bytes below; the
  // communicator's options() report the chunk in force.
  std::size_t chunk_bytes = 0;
  // Measured on 2-rank, 2-core nodes (docs/collective-benchmark.md, "Small messages and Open MPI"):
  // the pipeline's reductions beat Open MPI's at every size (1.4-19x), and its gathers below 1 MiB
  // (1.3-4.4x). From 1 MiB its gathers depend on how far apart the host runs the two virtual CPUs:
  // 1.4-3.5x faster when they share a cache, 0.45-0.5x when they do not, while Open MPI's
  // single-copy transfers hold in both; so gathers of 1 MiB and more go to Open MPI.
  bool native_gathers = true;
  std::size_t native_gathers_from_bytes = std::size_t{1} << 20;
  std::size_t native_below_bytes = 0;
  bool native_when_oversubscribed = false;
  // The threshold in force for gathers: SIZE_MAX when native_gathers is off.
  std::size_t gathers_to_mpi_from_bytes() const noexcept {
    return native_gathers ? native_gathers_from_bytes : SIZE_MAX;
  }
  // Measured on 2-rank, 2-core nodes (docs/collective-benchmark.md): a hand-off costs 5-40 us and
  // up to a quarter of a 1-4 MB call waited for at once, and train_mlp's steps ran 2-10% faster
  // with calls under 4 MiB inline; larger calls keep their overlap with the caller's work.
  std::size_t inline_below_bytes = std::size_t{4} << 20;
  int node_size = 0; // ZERO_NODE_SIZE

  // The defaults above, overridden by whichever ZERO_* variables are set.
  static CommOptions from_environment() {
    return from_environment(CommOptions());
  }
  // `defaults` overridden by whichever ZERO_* variables are set.
  static CommOptions from_environment(CommOptions defaults) {
    CommOptions o = defaults;
    if (auto v = detail::env_flag("ZERO_VALIDATE")) o.validate = *v;
    if (auto v = detail::env_number("ZERO_TIMEOUT_S")) o.timeout_seconds = *v;
    if (auto v = detail::env_number("ZERO_CHUNK_BYTES"))
      o.chunk_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_flag("ZERO_NATIVE_GATHERS")) o.native_gathers = *v;
    if (auto v = detail::env_number("ZERO_NATIVE_GATHERS_FROM_BYTES"))
      o.native_gathers_from_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_flag("ZERO_NATIVE_WHEN_OVERSUBSCRIBED"))
      o.native_when_oversubscribed = *v;
    if (auto v = detail::env_number("ZERO_NATIVE_BELOW_BYTES"))
      o.native_below_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_number("ZERO_INLINE_BELOW_BYTES"))
      o.inline_below_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_value("ZERO_MPI_TRANSPORT")) {
      if (*v == "auto")
        o.transport = Transport::automatic;
      else if (*v == "shm")
        o.transport = Transport::shared_memory;
      else if (*v == "mpi")
        o.transport = Transport::mpi;
      else if (*v == "hierarchical")
        o.transport = Transport::hierarchical;
      else
        fail(ErrorKind::invalid_argument,
             "ZERO_MPI_TRANSPORT=" + std::string(*v) + ": expected auto, shm, mpi or hierarchical");
    }
    if (auto v = detail::env_number("ZERO_NODE_SIZE")) {
      require(*v >= 0 && *v <= 1e6 && *v == static_cast<double>(static_cast<int>(*v)),
              "ZERO_NODE_SIZE must be a whole number of ranks per node, or 0 for the nodes MPI "
              "reports");
      o.node_size = static_cast<int>(*v);
    }
    require(o.chunk_bytes == 0 || o.chunk_bytes >= 4096,
            "ZERO_CHUNK_BYTES must be at least 4096 (or 0, the transport's default)");
    require(o.timeout_seconds > 0, "ZERO_TIMEOUT_S must be positive");
    return o;
  }
};

} // namespace zero
