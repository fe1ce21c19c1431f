#pragma once
// The type-erased description of one collective call. Communicators' typed front ends check sizes
// and build it; backends (shared memory, MPI, NCCL) execute it. Counts follow NCCL: for
// reduce_scatter `count` is the block each rank receives, for all_gather the block each rank
// sends; in-place calls pass recv == send + rank * count (reduce_scatter) or
// send == recv + rank * count (all_gather), also as in NCCL.
//
// A reduce_scatter or all_gather whose ranks own blocks of different sizes carries every rank's
// count in `counts` (a copy: the caller's list need not outlive the call); `count` is then this
// rank's own block, so that the send and receive sizes above keep their meaning, and block r starts
// at block_offset(r) instead of r * count.
//
// A reduce_scatter may carry `wire`, a block quantization for what crosses the network (ZeRO++'s
// qgZ): the hierarchical transport sends every contribution and every node's partial sum as
// quantized blocks; transports on one node, where no network is crossed, reduce exactly.

#include "zero/comm/reduce_op.hpp"
#include "zero/core/block_quantization.hpp"
#include "zero/core/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

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
  std::vector<std::size_t> counts; // per rank, for blocks of different sizes; empty: all `count`
  std::optional<BlockQuantization> wire; // reduce_scatter: quantize what crosses the network

  std::size_t element_bytes() const noexcept { return size_of(dtype); }
  bool variable_counts() const noexcept { return !counts.empty(); }

  // Rank r's block of a reduce_scatter's input or an all_gather's output: its size and start.
  std::size_t block_count(int r) const noexcept {
    return counts.empty() ? count : counts[static_cast<std::size_t>(r)];
  }
  std::size_t block_offset(int r) const noexcept {
    if (counts.empty()) return count * static_cast<std::size_t>(r);
    return std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
  }

  // Elements this rank sends and receives, for a communicator of `ranks` ranks.
  std::size_t send_count(int ranks) const noexcept {
    return kind == Collective::reduce_scatter ? block_offset(ranks) : count;
  }
  std::size_t recv_count(int ranks) const noexcept {
    return kind == Collective::all_gather ? block_offset(ranks) : count;
  }
  // The size nccl-tests reports for an op: the larger of its send and receive buffers.
  std::size_t payload_bytes(int ranks) const noexcept {
    const std::size_t elements =
        send_count(ranks) > recv_count(ranks) ? send_count(ranks) : recv_count(ranks);
    return kind == Collective::barrier ? 0 : elements * element_bytes();
  }

  // "all_reduce(1024 x float, sum)", "reduce_scatter([3, 5, 4] x float, sum)": for error messages
  // and timeouts.
  std::string describe() const {
    std::string text = std::string(to_string(kind));
    if (kind == Collective::barrier) return text + "()";
    text += "(" + (counts.empty() ? std::to_string(count) : describe_counts(counts)) + " x " +
            to_string(dtype);
    if (uses_reduce_op(kind)) text += ", " + std::string(to_string(op));
    if (uses_root(kind)) text += ", root " + std::to_string(root);
    if (wire)
      text += ", int" + std::to_string(wire->bits) + " blocks of " + std::to_string(wire->block) +
              " across nodes";
    return text + ")";
  }

  friend bool operator==(const CollectiveArgs&, const CollectiveArgs&) = default;

  // "[3, 5, 4]"; a long list keeps its head and tail, enough to tell calls apart in a message
  // without printing thousands of ranks.
  static std::string describe_counts(std::span<const std::size_t> list) {
    constexpr std::size_t head = 6, tail = 2;
    std::string text = "[";
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list.size() > head + tail && i == head) {
        text += "..., ";
        i = list.size() - tail;
      }
      text += std::to_string(list[i]) + (i + 1 < list.size() ? ", " : "");
    }
    return text + "]";
  }
};

} // namespace zero
