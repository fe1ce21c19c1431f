#pragma once
// Collectives over plain MPI calls, cut into chunks. Used when the ranks span several nodes (or
// when ZERO_MPI_TRANSPORT=mpi). Chunking keeps Open MPI on its fast path for medium messages
// instead of the temporary-buffer churn of its large-message algorithms. Half and bfloat16 are
// reduced in float (MPI has no such types), so the result is rounded once, as in shared memory.

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace zero::detail {

template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else static_assert(dependent_false<T>, "no MPI datatype for this element type");
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
  case ReduceOp::avg: return MPI_SUM;
  case ReduceOp::max: return MPI_MAX;
  case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

class MpiTransport {
public:
  MpiTransport(MPI_Comm comm, std::size_t chunk_bytes) : comm_(comm), chunk_bytes_(chunk_bytes) {
    ZERO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ZERO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  }

  void run(const CollectiveArgs& a) {
    if (a.kind == Collective::barrier) {
      ZERO_CHECK_MPI(MPI_Barrier(comm_));
      return;
    }
    visit_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      const auto* send = static_cast<const T*>(a.send);
      auto* recv = static_cast<T*>(a.recv);
      switch (a.kind) {
      case Collective::all_reduce: reduce(send, recv, a.count, a.op, -1); break;
      case Collective::reduce: reduce(send, recv, a.count, a.op, a.root); break;
      case Collective::reduce_scatter: reduce_scatter(send, recv, a.count, a.op); break;
      case Collective::all_gather: all_gather(send, recv, a.count); break;
      case Collective::broadcast: broadcast(send, recv, a.count, a.root); break;
      case Collective::barrier: break;
      }
    });
  }

private:
  template <class T>
  std::size_t chunk_elements() const noexcept {
    return std::max<std::size_t>(1, chunk_bytes_ / sizeof(accumulate_t<T>));
  }

  template <class A>
  A* scratch(std::size_t which, std::size_t n) {
    auto& s = scratch_[which];
    if (s.size() < n * sizeof(A)) s.resize(n * sizeof(A));
    return reinterpret_cast<A*>(s.data());
  }

  template <class A>
  void finish_avg(A* data, std::size_t n, ReduceOp op) const {
    if (op != ReduceOp::avg) return;
    const A ranks = static_cast<A>(size_);
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<A>(data[i] / ranks);
  }

  // all_reduce (root < 0) or reduce to root, chunk by chunk in the accumulation type.
  template <class T>
  void reduce(const T* in, T* out, std::size_t count, ReduceOp op, int root) {
    using A = accumulate_t<T>;
    const bool receives = root < 0 || root == rank_;
    for (std::size_t base = 0; base < count; base += chunk_elements<T>()) {
      const std::size_t m = std::min(chunk_elements<T>(), count - base);
      const int n = static_cast<int>(m);
      A* work = scratch<A>(0, m);
      convert_n(in + base, work, m);
      if (root < 0) ZERO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, work, n, mpi_datatype<A>(), mpi_op(op), comm_));
      else if (rank_ == root)
        ZERO_CHECK_MPI(MPI_Reduce(MPI_IN_PLACE, work, n, mpi_datatype<A>(), mpi_op(op), root, comm_));
      else ZERO_CHECK_MPI(MPI_Reduce(work, nullptr, n, mpi_datatype<A>(), mpi_op(op), root, comm_));
      if (!receives) continue;
      finish_avg(work, m, op);
      convert_n(work, out + base, m);
    }
  }

  template <class T>
  void reduce_scatter(const T* in, T* out, std::size_t block, ReduceOp op) {
    using A = accumulate_t<T>;
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_elements<T>() / ranks);
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      A* packed = scratch<A>(0, p * ranks);
      for (std::size_t r = 0; r < ranks; ++r) convert_n(in + r * block + offset, packed + r * p, p);
      A* mine = scratch<A>(1, p);
      ZERO_CHECK_MPI(MPI_Reduce_scatter_block(packed, mine, static_cast<int>(p), mpi_datatype<A>(),
                                              mpi_op(op), comm_));
      finish_avg(mine, p, op);
      convert_n(mine, out + offset, p);
    }
  }

  // Gathers and broadcasts move bytes: any element type, no conversion.
  template <class T>
  void all_gather(const T* in, T* out, std::size_t block) {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      T* gathered = scratch<T>(0, p * ranks);
      const T* mine = in + offset;
      if (static_cast<const void*>(mine) == static_cast<const void*>(out + rank_ * block + offset)) {
        // in place: copy first, the unpacking below writes over it
        T* own = scratch<T>(1, p);
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
  void broadcast(const T* in, T* out, std::size_t count, int root) {
    if (rank_ == root && count != 0 && static_cast<const void*>(in) != static_cast<void*>(out))
      std::memcpy(out, in, count * sizeof(T));
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T));
    for (std::size_t offset = 0; offset < count; offset += piece) {
      const std::size_t p = std::min(piece, count - offset);
      ZERO_CHECK_MPI(MPI_Bcast(out + offset, static_cast<int>(p * sizeof(T)), MPI_BYTE, root, comm_));
    }
  }

  MPI_Comm comm_;
  std::size_t chunk_bytes_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::byte> scratch_[2];
};

} // namespace zero::detail
