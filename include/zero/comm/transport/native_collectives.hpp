#pragma once
// A described collective as one plain MPI call (Open MPI's own algorithms): what zero's
// shared-memory transport hands over to where Open MPI is faster on this node (small gathers,
// 2-rank sums), and the baseline of the collective benchmark. Averages are sums divided by the rank
// count afterwards (MPI has no average); half and bfloat16 reductions are not possible (MPI has no
// such types). Blocks of different sizes are gathered with MPI_Allgatherv; their reductions stay on
// zero's rank-ordered pipelines (MPI's order of summation is unknown, and they must match the bits
// of the equal-block reduce_scatter).

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/transport/mpi_transport.hpp"
#include "zero/core/dtype.hpp"

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstring>
#include <vector>

namespace zero::detail {

// Whether run_native can execute `a` (MPI reduces no half or bfloat16; counts must fit an int).
inline bool native_supports(const CollectiveArgs& a, int ranks) {
  if (uses_reduce_op(a.kind) && (is_low_precision(a.dtype) || a.variable_counts())) return false;
  return a.payload_bytes(ranks) <= std::size_t(INT_MAX);
}

// Blocks of different sizes, in place when `send` is this rank's block of `recv`.
inline void all_gather_variable_native(MPI_Comm comm, const CollectiveArgs& a, int rank,
                                       int ranks) {
  std::vector<int> bytes(static_cast<std::size_t>(ranks)), starts(bytes.size());
  int start = 0; // native_supports: the whole output fits an int
  for (int r = 0; r < ranks; ++r) {
    bytes[std::size_t(r)] = static_cast<int>(a.block_count(r) * a.element_bytes());
    starts[std::size_t(r)] = start;
    start += bytes[std::size_t(r)];
  }
  const auto* mine = static_cast<const std::byte*>(a.recv) + starts[std::size_t(rank)];
  const void* send = mine == a.send ? MPI_IN_PLACE : a.send;
  ZERO_CHECK_MPI(MPI_Allgatherv(send, bytes[std::size_t(rank)], MPI_BYTE, a.recv, bytes.data(),
                                starts.data(), MPI_BYTE, comm));
}

inline void run_native(MPI_Comm comm, const CollectiveArgs& a) {
  int rank = 0, ranks = 1;
  ZERO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ZERO_CHECK_MPI(MPI_Comm_size(comm, &ranks));
  // (Not require(): its message would be built on every call, a describe() and two allocations
  // that cost 7% of a 4 KiB all_gather.)
  if (!native_supports(a, ranks))
    fail(ErrorKind::invalid_argument, "MPI cannot run " + a.describe() + " as one call");
  const std::size_t element = a.element_bytes();
  const int bytes = static_cast<int>(a.count * element);
  if (a.kind == Collective::barrier) {
    ZERO_CHECK_MPI(MPI_Barrier(comm));
    return;
  }
  if (a.kind == Collective::all_gather && a.variable_counts()) {
    all_gather_variable_native(comm, a, rank, ranks);
    return;
  }
  if (a.kind == Collective::all_gather) {
    const auto* mine =
        static_cast<const std::byte*>(a.recv) + std::size_t(rank) * std::size_t(bytes);
    const void* send = mine == a.send ? MPI_IN_PLACE : a.send;
    ZERO_CHECK_MPI(MPI_Allgather(send, bytes, MPI_BYTE, a.recv, bytes, MPI_BYTE, comm));
    return;
  }
  if (a.kind == Collective::broadcast) {
    if (rank == a.root && a.send != a.recv && bytes > 0)
      std::memcpy(a.recv, a.send, std::size_t(bytes));
    ZERO_CHECK_MPI(MPI_Bcast(a.recv, bytes, MPI_BYTE, a.root, comm));
    return;
  }
  visit_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!LowPrecision<T>) {
      const MPI_Datatype type = mpi_datatype<T>();
      const MPI_Op op = mpi_op(a.op);
      const int n = static_cast<int>(a.count);
      auto* out = static_cast<T*>(a.recv);
      std::size_t received = a.count;
      if (a.kind == Collective::all_reduce) {
        ZERO_CHECK_MPI(
            MPI_Allreduce(a.send == a.recv ? MPI_IN_PLACE : a.send, a.recv, n, type, op, comm));
      } else if (a.kind == Collective::reduce) {
        const bool in_place = rank == a.root && a.send == a.recv;
        ZERO_CHECK_MPI(
            MPI_Reduce(in_place ? MPI_IN_PLACE : a.send, a.recv, n, type, op, a.root, comm));
        if (rank != a.root) received = 0;
      } else { // reduce_scatter: in place when recv is this rank's block of send
        const auto* block =
            static_cast<const std::byte*>(a.send) + std::size_t(rank) * std::size_t(bytes);
        const bool in_place = block == a.recv;
        ZERO_CHECK_MPI(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : a.send,
                                                in_place ? const_cast<void*>(a.send) : a.recv, n,
                                                type, op, comm));
        if (in_place && bytes > 0) std::memmove(a.recv, a.send, std::size_t(bytes));
      }
      if (a.op == ReduceOp::avg)
        for (std::size_t i = 0; i < received; ++i)
          out[i] = static_cast<T>(out[i] / static_cast<T>(ranks));
    }
  });
}

} // namespace zero::detail
