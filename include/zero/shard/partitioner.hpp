#pragma once
// The Partitioner concept: a small struct that turns a parameter list and a world size into a
// ShardLayout (through LayoutBuilder) and says, at compile time, whether its slices are equal.
//
//   struct MyPartitioner {
//     static constexpr bool equal_slices = false;
//     ShardLayout partition(std::span<const ParameterSpec> params, int world_size) const;
//   };
//
// Code that reduce-scatters or all-gathers one flat buffer per layer needs equal blocks:
//   static_assert(EqualSlices<P>, "stage 3 needs a partitioner with equal slices");

#include "zero/shard/layout_builder.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <concepts>
#include <span>

namespace zero {

template <class P>
concept Partitioner = std::copy_constructible<P> &&
    requires(const P& partitioner, std::span<const ParameterSpec> params, int world_size) {
  { P::equal_slices } -> std::convertible_to<bool>;
  { partitioner.partition(params, world_size) } -> std::same_as<ShardLayout>;
};

// Every rank's block of a layer has the same size, so a layer is one reduce-scatter and one
// all-gather of equal blocks.
template <class P>
concept EqualSlices = Partitioner<P> && static_cast<bool>(P::equal_slices);

// The layout of `params` over `world_size` ranks, without communication (tests, tools, planning).
// make_layout(comm, ...) in verify.hpp also checks that every rank built the same one.
template <Partitioner P>
ShardLayout make_layout(const P& partitioner, std::span<const ParameterSpec> params,
                        int world_size) {
  return partitioner.partition(params, world_size);
}

} // namespace zero
