#pragma once
// TensorParallelGroups: one communicator cut two ways. The ranks are a grid of data-parallel
// replicas, each of `tensor_size` consecutive ranks: rank r is tensor rank r % tensor_size of
// the tensor-parallel group r / tensor_size, and data rank r / tensor_size of the data-parallel
// group of the ranks holding the same slices (Megatron-LM's order, so that the tensor-parallel
// traffic, which runs on every layer, stays between neighbours: on one node when a node holds a
// multiple of tensor_size ranks). The engine takes the groups whole: its model states are sharded
// over data(), and the step's norm and overflow check are agreed over both.
//
//   zero::MpiCommunicator world;
//   zero::TensorParallelGroups groups(world, 2);   // 4 ranks: {0, 1} {2, 3} hold slices,
//                                                  //          {0, 2} {1, 3} replicas
//   Engine engine(groups, my_slices_specs, adam, scaler, options);

#include "zero/comm/communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zero {

template <Communicator Comm>
class TensorParallelGroups {
 public:
  using communicator_type = Comm;

  // Collective over `world` (two splits). Refuses, on every rank alike, a group size that does not
  // divide the world or that differs between ranks (the splits would otherwise pair up ranks
  // that disagree on the grid, and their first collective would wait for good).
  TensorParallelGroups(Comm& world,
                       int tensor_size) requires HostAccessibleSpace<typename Comm::memory_space>
      : TensorParallelGroups(world, tensor_size, world) {}
  // A communicator of device memory (StagedCommunicator, NcclCommunicator, whose split is
  // ncclCommSplit) and a host communicator of the same ranks in the same order, which agrees on
  // the group size first.
  template <Communicator Host>
  requires HostAccessibleSpace<typename Host::memory_space>
  TensorParallelGroups(Comm& world, int tensor_size, Host& host_world)
      : tensor_size_(checked(host_world, world, tensor_size)),
        tensor_(world.split(world.rank() / tensor_size, world.rank() % tensor_size)),
        data_(world.split(world.rank() % tensor_size, world.rank() / tensor_size)),
        world_rank_(world.rank()), world_size_(world.size()) {}

  // The ranks holding the other slices of this rank's tensors, in slice order.
  Comm& tensor() noexcept { return tensor_; }
  const Comm& tensor() const noexcept { return tensor_; }
  // The ranks holding the same slices: what ZeRO shards the model states over.
  Comm& data() noexcept { return data_; }
  const Comm& data() const noexcept { return data_; }

  int tensor_rank() const noexcept { return tensor_.rank(); }
  int tensor_size() const noexcept { return tensor_size_; }
  int data_rank() const noexcept { return data_.rank(); }
  int data_size() const noexcept { return data_.size(); }
  int world_rank() const noexcept { return world_rank_; }
  int world_size() const noexcept { return world_size_; }

 private:
  template <class Host>
  static int checked(Host& host_world, const Comm& world, int tensor_size) {
    // Each rank's group size and place in both communicators, seen by every rank.
    std::vector<std::int64_t> mine{tensor_size, world.rank(), world.size()};
    std::vector<std::int64_t> all(3 * static_cast<std::size_t>(host_world.size()));
    host_world.all_gather(mine, all).wait();
    for (std::size_t r = 0; r < all.size() / 3; ++r) {
      require_on_every_rank(
          all[3 * r + 1] == std::int64_t(r) && all[3 * r + 2] == std::int64_t(host_world.size()),
          "tensor parallelism: rank " + std::to_string(r) + " of the host communicator is rank " +
              std::to_string(all[3 * r + 1]) + " of " + std::to_string(all[3 * r + 2]) +
              " of the world (they must hold the same ranks in order)");
      require_on_every_rank(all[3 * r] == all[0],
                            "tensor parallelism: rank 0 asked for groups of " +
                                std::to_string(all[0]) + " ranks, rank " + std::to_string(r) +
                                " for groups of " + std::to_string(all[3 * r]));
    }
    require_on_every_rank(tensor_size >= 1,
                          "tensor parallelism: the group size must be at least 1, not " +
                              std::to_string(tensor_size),
                          ErrorKind::invalid_argument);
    require_on_every_rank(world.size() % tensor_size == 0,
                          "tensor parallelism: " + std::to_string(world.size()) +
                              " ranks do not split into groups of " + std::to_string(tensor_size) +
                              " (the world size must be a multiple of the tensor-parallel size)",
                          ErrorKind::invalid_argument);
    return tensor_size;
  }

  int tensor_size_;
  Comm tensor_;
  Comm data_;
  int world_rank_;
  int world_size_;
};

} // namespace zero
