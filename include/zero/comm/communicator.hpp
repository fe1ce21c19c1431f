#pragma once
// The Communicator concept: what zero's sharding, reduction and engine code needs from a group of
// ranks. Every collective is non-blocking and returns a Work handle. Smaller concepts name the
// parts a policy may require (e.g. a stage that all-gathers parameters needs
// GatheringCommunicator), so that a missing operation is a readable compile error.
// VariableCountCommunicator adds reduce_scatter and all_gather over blocks of different sizes (for
// partitioners whose ranks own unequal shards); it is separate so that communicators written before
// it keep satisfying Communicator. QuantizingCommunicator adds a reduce_scatter whose
// contributions cross the network as quantized blocks (ZeRO++'s qgZ).

#include "zero/comm/collective.hpp"
#include "zero/comm/reduce_op.hpp"
#include "zero/core/block_quantization.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"

#include <concepts>
#include <cstddef>
#include <span>

namespace zero {

template <class C>
concept CommunicatorGroup = requires(const C& cc) {
  typename C::memory_space;
  requires MemorySpace<typename C::memory_space>;
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
};

template <class C>
concept ReducingCommunicator = CommunicatorGroup<C> &&
    requires(C& c, View<const float, typename C::memory_space> in,
             View<float, typename C::memory_space> out, ReduceOp op) {
  { c.all_reduce(in, out, op) } -> std::same_as<Work>;
  { c.all_reduce(out, op) } -> std::same_as<Work>;
  { c.reduce_scatter(in, out, op) } -> std::same_as<Work>;
  { c.reduce_scatter(out, op) } -> std::same_as<Work>;
  { c.reduce(in, out, op, 0) } -> std::same_as<Work>;
};

template <class C>
concept GatheringCommunicator = CommunicatorGroup<C> &&
    requires(C& c, View<const float, typename C::memory_space> in,
             View<float, typename C::memory_space> out) {
  { c.all_gather(in, out) } -> std::same_as<Work>;
  { c.all_gather(out) } -> std::same_as<Work>;
  { c.broadcast(out, 0) } -> std::same_as<Work>;
};

template <class C>
concept VariableCountCommunicator = CommunicatorGroup<C> &&
    requires(C& c, View<const float, typename C::memory_space> in,
             View<float, typename C::memory_space> out, std::span<const std::size_t> counts,
             ReduceOp op) {
  { c.reduce_scatter(in, out, counts, op) } -> std::same_as<Work>;
  { c.all_gather(in, out, counts) } -> std::same_as<Work>;
};

template <class C>
concept QuantizingCommunicator = VariableCountCommunicator<C> &&
    requires(C& c, View<const float, typename C::memory_space> in,
             View<float, typename C::memory_space> out, std::span<const std::size_t> counts,
             ReduceOp op, const BlockQuantization& wire) {
  { c.reduce_scatter(in, out, counts, op, wire) } -> std::same_as<Work>;
};

template <class C>
concept Communicator = ReducingCommunicator<C> && GatheringCommunicator<C> && requires(C& c) {
  {c.barrier()};
  { c.split(0, 0) } -> std::same_as<C>;
};

} // namespace zero
