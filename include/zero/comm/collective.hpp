#pragma once
// The type-erased description of one collective call. Communicators' typed front ends check sizes
// and build it; backends (shared memory, MPI, NCCL) execute it. Counts follow NCCL: for
// reduce_scatter `count` is the block each rank receives, for all_gather the block each rank
// sends; in-place calls pass recv == send + rank * count (reduce_scatter) or
// send == recv + rank * count (all_gather), also as in NCCL.

#include "zero/comm/reduce_op.hpp"
#include "zero/core/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero {

enum class Collective : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  reduce,
  barrier
};

inline constexpr Collective all_collectives[] = {Collective::all_reduce, Collective::reduce_scatter,
                                                 Collective::all_gather, Collective::broadcast,
                                                 Collective::reduce,     Collective::barrier};

constexpr const char* to_string(Collective c) noexcept {
  switch (c) {
  case Collective::all_reduce:
    return "all_reduce";
  case Collective::reduce_scatter:
    return "reduce_scatter";
  case Collective::all_gather:
    return "all_gather";
  case Collective::broadcast:
    return "broadcast";
  case Collective::reduce:
    return "reduce";
  case Collective::barrier:
    return "barrier";
  }
  return "?";
}

constexpr bool uses_reduce_op(Collective c) noexcept {
  return c == Collective::all_reduce || c == Collective::reduce_scatter || c == Collective::reduce;
}
constexpr bool uses_root(Collective c) noexcept {
  return c == Collective::broadcast || c == Collective::reduce;
}

struct CollectiveArgs {
  Collective kind = Collective::barrier;
  DType dtype = DType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;

  std::size_t element_bytes() const noexcept { return size_of(dtype); }

  // Elements this rank sends and receives, for a communicator of `ranks` ranks.
  std::size_t send_count(int ranks) const noexcept {
    return kind == Collective::reduce_scatter ? count * static_cast<std::size_t>(ranks) : count;
  }
  std::size_t recv_count(int ranks) const noexcept {
    return kind == Collective::all_gather ? count * static_cast<std::size_t>(ranks) : count;
  }
  // The size nccl-tests reports for an op: the larger of its send and receive buffers.
  std::size_t payload_bytes(int ranks) const noexcept {
    const std::size_t elements =
        send_count(ranks) > recv_count(ranks) ? send_count(ranks) : recv_count(ranks);
    return kind == Collective::barrier ? 0 : elements * element_bytes();
  }

  // "all_reduce(1024 x float, sum)": for error messages and timeouts.
  std::string describe() const {
    std::string text = std::string(to_string(kind));
    if (kind == Collective::barrier) return text + "()";
    text += "(" + std::to_string(count) + " x " + to_string(dtype);
    if (uses_reduce_op(kind)) text += ", " + std::string(to_string(op));
    if (uses_root(kind)) text += ", root " + std::to_string(root);
    return text + ")";
  }

  friend bool operator==(const CollectiveArgs&, const CollectiveArgs&) = default;
};

} // namespace zero
