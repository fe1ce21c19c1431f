#pragma once
// Storage policies of ShardedTensor: small structs that say where a tensor's elements live and
// which slice of them a rank keeps. A policy names its memory space (or zero::nvme, for a sharded
// slice kept in a swap file), says whether ranks keep disjoint slices (`sharded`) and makes the
// layout of the tensor:
//
//   struct MyPolicy {
//     using memory_space = zero::pinned_host;
//     static constexpr bool sharded = true;
//     ShardLayout layout(std::span<const ParameterSpec> params, int world_size) const;
//   };
//
// - Replicated: the whole tensor on every rank. Its layout is the one-slice layout (world size 1
//   in the layout: one slice, which every rank holds), so its queries describe the whole tensor.
// - Sharded<Partitioner>: rank r keeps slice r of the partitioner's layout; gathers, reductions
//   and scatters move the other slices.
// Either may keep its slice in device memory (zero::cuda): then the tensor's views are device
// memory, for device code and a communicator of that memory, and ShardedTensor's host-side
// gathers, scatters and copies do not compile for it.

#include "zero/core/memory_space.hpp"
#include "zero/core/nvme.hpp"
#include "zero/shard/flat_contiguous.hpp"
#include "zero/shard/layout_builder.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/partitioner.hpp"
#include "zero/shard/shard_layout.hpp"

#include <concepts>
#include <cstddef>
#include <span>
#include <utility>

namespace zero {

template <class P>
concept StoragePolicy = std::copy_constructible<P> &&
    (MemorySpace<typename P::memory_space> ||
     std::same_as<typename P::memory_space, nvme>)&&requires(const P& policy,
                                                             std::span<const ParameterSpec> params,
                                                             int world_size) {
  { P::sharded } -> std::convertible_to<bool>;
  { policy.layout(params, world_size) } -> std::same_as<ShardLayout>;
};

template <MemorySpace Space = host>
struct ReplicatedIn {
  using memory_space = Space;
  static constexpr bool sharded = false;

  ShardLayout layout(std::span<const ParameterSpec> params, int /*world_size*/) const {
    LayoutBuilder b(params, 1, {.policy = "replicated", .equal_slices = true});
    for (std::size_t g = 0; g < b.layer_count(); ++g) {
      b.begin_layer(g);
      for (std::size_t p : b.layer_parameters(g))
        b.place(p, 0, 0, b.parameter(p).numel);
    }
    return std::move(b).finish();
  }
};
using Replicated = ReplicatedIn<host>;

template <Partitioner P, StorageSpace Space = host>
requires MemorySpace<Space> || std::same_as<Space, nvme>
struct Sharded {
  using memory_space = Space;
  using partitioner_type = P;
  static constexpr bool sharded = true;
  static constexpr bool equal_slices = P::equal_slices;

  P partitioner{};
  Space space{}; // the NVMe tier the slice's file goes to; nothing for memory spaces

  ShardLayout layout(std::span<const ParameterSpec> params, int world_size) const {
    return partitioner.partition(params, world_size);
  }
};

} // namespace zero
