#pragma once
// Collectives over plain MPI calls, cut into chunks. Used when the ranks span several nodes (or
// when ZERO_MPI_TRANSPORT=mpi). Chunking keeps Open MPI on its fast path for medium messages
// instead of the temporary-buffer churn of its large-message algorithms.
//
// Reductions never use MPI's reduction operators: a reduce-scatter is an all-to-all of blocks
// followed by a local sum in rank order (as many bytes on the wire as a ring), an all-reduce is
// that plus an all-gather, a reduce that plus a gather. So every element is summed in the same
// fixed order as in the shared-memory transport, whatever MPI's algorithm, and half and bfloat16
// accumulate in float although MPI has no such types. Blocks of different sizes use the same
// scheme through MPI_Alltoallv and MPI_Allgatherv, each block's pieces clamped to its size
// (variable_blocks.hpp).

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/comm/transport/host_reduce.hpp"
#include "zero/comm/transport/scratch_buffers.hpp"
#include "zero/comm/transport/typed_dispatch.hpp"
#include "zero/comm/transport/variable_blocks.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace zero::detail {

template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return MPI_UINT8_T;
  else
    static_assert(dependent_false<T>, "no MPI datatype for this element type");
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
  case ReduceOp::avg:
    return MPI_SUM;
  case ReduceOp::max:
    return MPI_MAX;
  case ReduceOp::min:
    return MPI_MIN;
  }
  return MPI_SUM;
}

// Broadcast from root as Open MPI's own calls of chunk_bytes each (bytes only: no arithmetic).
template <class T>
void chunked_broadcast(MPI_Comm comm, int rank, const T* in, T* out, std::size_t count, int root,
                       std::size_t chunk_bytes) {
  if (rank == root && count != 0 && static_cast<const void*>(in) != static_cast<void*>(out))
    std::memcpy(out, in, count * sizeof(T));
  const std::size_t piece = std::max<std::size_t>(1, chunk_bytes / sizeof(T));
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t p = std::min(piece, count - offset);
    ZERO_CHECK_MPI(MPI_Bcast(out + offset, static_cast<int>(p * sizeof(T)), MPI_BYTE, root, comm));
  }
}

class MpiTransport {
 public:
  void abandon() noexcept {} // nothing collective to skip when it goes
  MpiTransport(MPI_Comm comm, std::size_t chunk_bytes) : comm_(comm), chunk_bytes_(chunk_bytes) {
    ZERO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ZERO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  }

  void run(const CollectiveArgs& a) {
    if (a.kind == Collective::barrier) {
      arrive_together(comm_, "barrier");
      return;
    }
    run_typed(*this, a);
  }

 private:
  template <class Transport>
  friend void run_typed(Transport&, const CollectiveArgs&);

  // all_reduce (root < 0) or reduce to root: per chunk, reduce-scatter into equal blocks, then
  // all-gather (or gather) the reduced blocks.
  template <class T>
  void reduce(const T* in, T* out, std::size_t count, ReduceOp op, int root) {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t block_max = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    for (std::size_t base = 0; base < count; base += block_max * ranks) {
      const std::size_t m = std::min(block_max * ranks, count - base);
      const std::size_t block = (m + ranks - 1) / ranks; // the last block is padded
      T* padded = scratch_.get<T>(2, block * ranks);
      std::memcpy(padded, in + base, m * sizeof(T));
      std::memset(static_cast<void*>(padded + m), 0, (block * ranks - m) * sizeof(T));
      T* mine = scratch_.get<T>(3, block);
      reduce_scatter_piece(padded, block, block, mine, op);
      T* gathered = scratch_.get<T>(2, block * ranks); // the padded input is no longer needed
      const int bytes = static_cast<int>(block * sizeof(T));
      if (root < 0) {
        ZERO_CHECK_MPI(MPI_Allgather(mine, bytes, MPI_BYTE, gathered, bytes, MPI_BYTE, comm_));
      } else {
        ZERO_CHECK_MPI(MPI_Gather(mine, bytes, MPI_BYTE, gathered, bytes, MPI_BYTE, root, comm_));
        if (rank_ != root) continue;
      }
      std::memcpy(out + base, gathered, m * sizeof(T));
    }
  }

  template <class T>
  void reduce_scatter(const T* in, T* out, std::size_t block, ReduceOp op) {
    const std::size_t piece =
        std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / std::size_t(size_));
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      // The pieces are read before the result is written, so in place (out inside in) is safe.
      reduce_scatter_piece(in + offset, block, p, scratch_.get<T>(3, p), op);
      std::memcpy(out + offset, scratch_.get<T>(3, p), p * sizeof(T));
    }
  }

  // Reduces elements [0, p) of every rank's block r (blocks `stride` apart in `in`) into `out` on
  // rank r: an all-to-all of the pieces, then a sum in rank order.
  template <class T>
  void reduce_scatter_piece(const T* in, std::size_t stride, std::size_t p, T* out, ReduceOp op) {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    T* packed = scratch_.get<T>(0, p * ranks);
    for (std::size_t r = 0; r < ranks; ++r)
      std::memcpy(packed + r * p, in + r * stride, p * sizeof(T));
    T* received = scratch_.get<T>(1, p * ranks);
    const int bytes = static_cast<int>(p * sizeof(T));
    ZERO_CHECK_MPI(MPI_Alltoall(packed, bytes, MPI_BYTE, received, bytes, MPI_BYTE, comm_));
    std::vector<const T*> sources(ranks);
    for (std::size_t r = 0; r < ranks; ++r)
      sources[r] = received + r * p;
    reduce_sources<T>(out, sources, p, op, size_);
  }

  // Per step, rank r sends every rank its piece of block r and sums the pieces of its own block it
  // received, in rank order, straight into `out`: the pieces were packed before anything is
  // written, and later steps read only further along, so in place is safe.
  template <class T>
  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts, ReduceOp op) {
    const std::size_t ranks = counts.size();
    const std::size_t me = static_cast<std::size_t>(rank_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    const std::vector<std::size_t> starts = block_starts(counts);
    std::vector<int> send_bytes(ranks), send_starts(ranks), recv_bytes(ranks), recv_starts(ranks);
    std::vector<const T*> sources(ranks);
    for (std::size_t offset = 0; offset < largest_block(counts); offset += piece) {
      T* packed = scratch_.get<T>(0, piece * ranks);
      std::size_t packed_count = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        const std::size_t p = piece_of(counts[r], offset, piece);
        if (p != 0) std::memcpy(packed + packed_count, in + starts[r] + offset, p * sizeof(T));
        send_bytes[r] = static_cast<int>(p * sizeof(T));
        send_starts[r] = static_cast<int>(packed_count * sizeof(T));
        packed_count += p;
      }
      const std::size_t own = piece_of(counts[me], offset, piece);
      T* received = scratch_.get<T>(1, own * ranks);
      for (std::size_t r = 0; r < ranks; ++r) {
        recv_bytes[r] = static_cast<int>(own * sizeof(T));
        recv_starts[r] = static_cast<int>(r * own * sizeof(T));
        sources[r] = received + r * own;
      }
      ZERO_CHECK_MPI(MPI_Alltoallv(packed, send_bytes.data(), send_starts.data(), MPI_BYTE,
                                   received, recv_bytes.data(), recv_starts.data(), MPI_BYTE,
                                   comm_));
      if (own != 0) reduce_sources<T>(out + offset, sources, own, op, size_);
    }
  }

  // Gathers and broadcasts move bytes: any element type, no conversion.
  template <class T>
  void all_gather(const T* in, T* out, std::size_t block) {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      T* gathered = scratch_.get<T>(0, p * ranks);
      const T* mine = in + offset;
      if (static_cast<const void*>(mine) ==
          static_cast<const void*>(out + rank_ * block + offset)) {
        // in place: copy first, the unpacking below writes over it
        T* own = scratch_.get<T>(1, p);
        std::memcpy(own, mine, p * sizeof(T));
        mine = own;
      }
      ZERO_CHECK_MPI(MPI_Allgather(mine, static_cast<int>(p * sizeof(T)), MPI_BYTE, gathered,
                                   static_cast<int>(p * sizeof(T)), MPI_BYTE, comm_));
      for (std::size_t r = 0; r < ranks; ++r)
        std::memcpy(out + r * block + offset, gathered + r * p, p * sizeof(T));
    }
  }

  template <class T>
  void all_gather(const T* in, T* out, std::span<const std::size_t> counts) {
    const std::size_t ranks = counts.size();
    const std::size_t me = static_cast<std::size_t>(rank_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    const std::vector<std::size_t> starts = block_starts(counts);
    std::vector<int> bytes(ranks), gathered_starts(ranks);
    for (std::size_t offset = 0; offset < largest_block(counts); offset += piece) {
      std::size_t gathered_count = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        bytes[r] = static_cast<int>(piece_of(counts[r], offset, piece) * sizeof(T));
        gathered_starts[r] = static_cast<int>(gathered_count * sizeof(T));
        gathered_count += piece_of(counts[r], offset, piece);
      }
      T* gathered = scratch_.get<T>(0, gathered_count);
      // In place, the own piece is sent from `out` and copied back onto itself from `gathered`.
      const T* own = bytes[me] != 0 ? in + offset : in;
      ZERO_CHECK_MPI(MPI_Allgatherv(own, bytes[me], MPI_BYTE, gathered, bytes.data(),
                                    gathered_starts.data(), MPI_BYTE, comm_));
      for (std::size_t r = 0; r < ranks; ++r)
        if (bytes[r] != 0)
          std::memcpy(out + starts[r] + offset,
                      reinterpret_cast<const std::byte*>(gathered) + gathered_starts[r],
                      std::size_t(bytes[r]));
    }
  }

  template <class T>
  void broadcast(const T* in, T* out, std::size_t count, int root) {
    chunked_broadcast(comm_, rank_, in, out, count, root, chunk_bytes_);
  }

  MPI_Comm comm_;
  std::size_t chunk_bytes_;
  int rank_ = 0;
  int size_ = 1;
  ScratchBuffers<4> scratch_;
};

} // namespace zero::detail
