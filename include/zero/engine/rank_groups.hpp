#pragma once
// RankGroups: the communicators an engine talks through, made from the caller's at construction.
// The world (initial broadcasts, the options' agreement), the shard group that splits the model
// states (all ranks, or `shard_within<N>` consecutive ranks) and, for shard_within plans, the
// replica group of ranks holding the same shard; under tensor parallelism, the tensor-parallel
// group beside them (the norm and the overflow check are agreed over it). Each counts its own
// traffic, so a step's communication can be shown next to the ZeRO paper's volumes.
//
// Two kinds of collectives: the stores' move the model states (data), the engine's own move host
// values (control: the layout's and the options' agreement, set_layer's broadcast, the norm, the
// checkpoints). A host communicator does both. A communicator of device memory (StagedCommunicator,
// NcclCommunicator) does the data, and a host communicator given beside it the control, split into
// the same world and shard groups.

#include "zero/comm/agreed.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/comm/counting_communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/stage/plan.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace zero {

template <ShardingPlanType Plan, Communicator Comm, Communicator Control = Comm>
class RankGroups {
  static constexpr bool separate_control = !std::same_as<Comm, Control>;

 public:
  using counted_type = CountingCommunicator<Comm>;
  using control_type = CountingCommunicator<Control>;

  // hpz_ranks > 1: also the groups of that many consecutive ranks of the shard group (hpZ).
  explicit RankGroups(Comm& comm, int hpz_ranks = 1) requires(!separate_control)
      : world_(checked_counts(comm, hpz_ranks).split(0, comm.rank())),
        shard_(make_shard_group(comm)), replica_(make_replica_group(comm)),
        hpz_(make_hpz_group(shard(), hpz_ranks)) {}
  // Tensor parallelism: the groups above over `data`, the ranks holding the same slices, and a
  // copy of `tensor`, the ranks holding the other slices (none when it is one rank).
  RankGroups(Comm& data, Comm& tensor, int hpz_ranks) requires(!separate_control)
      : RankGroups(data, hpz_ranks) {
    if (tensor.size() > 1) tensor_.emplace(tensor.split(0, tensor.rank()));
  }
  // Data over `comm`, control over `control`: the same ranks in the same order.
  RankGroups(Control& control, Comm& comm, int hpz_ranks = 1) requires separate_control
      : world_(checked_counts(same_ranks(control, comm), hpz_ranks).split(0, comm.rank())),
        shard_(make_shard_group(comm)),
        replica_(make_replica_group(comm)),
        hpz_(make_hpz_group(shard(), hpz_ranks)),
        control_(make_control(control)) {}

  counted_type& world() noexcept { return world_; }
  counted_type& shard() noexcept { return shard_ ? *shard_ : world_; }
  const counted_type& shard() const noexcept { return shard_ ? *shard_ : world_; }
  // The ranks holding the same shard, or null when every rank holds its own.
  counted_type* replica() noexcept { return replica_ ? &*replica_ : nullptr; }
  // The ranks sharing stage 3's secondary weight copy (hpZ), or null without one.
  counted_type* hpz() noexcept { return hpz_ ? &*hpz_ : nullptr; }
  // The tensor-parallel group, or null without tensor parallelism (or with groups of one rank).
  counted_type* tensor() noexcept { return tensor_ ? &*tensor_ : nullptr; }
  const counted_type* tensor() const noexcept { return tensor_ ? &*tensor_ : nullptr; }

  // The same groups for the engine's host collectives.
  control_type& control_world() noexcept {
    if constexpr (separate_control)
      return control_.world;
    else
      return world();
  }
  // The tensor-parallel group for the engine's host collectives (a device engine has none).
  control_type* control_tensor() noexcept {
    if constexpr (separate_control)
      return nullptr;
    else
      return tensor();
  }
  control_type& control_shard() noexcept {
    if constexpr (separate_control)
      return control_.shard ? *control_.shard : control_.world;
    else
      return shard();
  }

  // build() on every rank, agreed where a failure on one rank could leave others waiting: the
  // host stores agree within the shard group on what can fail on one rank, so with one group of
  // all ranks there is nothing more to agree; with several groups (shard_within) the groups agree
  // too, or one group's failure would leave the others in the first world collective; the device
  // stores cannot agree over their communicator (an allocation failing on one of the ranks sharing
  // a GPU), so the host one agrees for them.
  template <class Build>
  void build_agreed(const char* what, Build&& build) {
    if (!separate_control && shard().size() == world().size())
      build();
    else
      agreed(control_world(), what, build);
  }

  // Everything communicated since construction, all groups.
  CommStats total() const {
    CommStats total = world_.stats();
    if (shard_) total += shard_->stats();
    if (replica_) total += replica_->stats();
    if (hpz_) total += hpz_->stats();
    if (tensor_) total += tensor_->stats();
    if constexpr (separate_control) {
      total += control_.world.stats();
      if (control_.shard) total += control_.shard->stats();
    }
    return total;
  }
  // What the hpZ groups communicated (within a node when they are nodes), part of total().
  CommStats hpz_total() const { return hpz_ ? hpz_->stats() : CommStats{}; }

 private:
  // What the number of ranks rules out is refused before the first split: a refusal once a
  // communicator exists leaves it to a teardown that cannot tell whether every rank refused, and
  // a communicator left behind keeps its shared-memory window to the end of the process.
  static Comm& checked_counts(Comm& comm, int hpz_ranks) {
    int shard_ranks = comm.size();
    if constexpr (Plan::group_ranks != 0) {
      require(comm.size() % Plan::group_ranks == 0,
              "engine: shard_within<" + std::to_string(Plan::group_ranks) +
                  "> needs a multiple of " + std::to_string(Plan::group_ranks) + " ranks, not " +
                  std::to_string(comm.size()));
      shard_ranks = Plan::group_ranks;
    }
    require(hpz_ranks <= 1 || shard_ranks % hpz_ranks == 0,
            "engine: hpz_partition_size (zero_hpz_partition_size) " + std::to_string(hpz_ranks) +
                " does not divide the shard group of " + std::to_string(shard_ranks) + " ranks");
    return comm;
  }

  static std::optional<counted_type> make_shard_group(Comm& comm) {
    if constexpr (Plan::group_ranks == 0) {
      return std::nullopt; // the world is the shard group
    } else {
      return counted_type(comm.split(comm.rank() / Plan::group_ranks, comm.rank()));
    }
  }
  static std::optional<counted_type> make_replica_group(Comm& comm) {
    if constexpr (Plan::group_ranks == 0) {
      return std::nullopt;
    } else {
      if (comm.size() == Plan::group_ranks) return std::nullopt;
      return counted_type(comm.split(comm.rank() % Plan::group_ranks, comm.rank()));
    }
  }

  static std::optional<counted_type> make_hpz_group(counted_type& shard, int ranks) {
    if (ranks <= 1) return std::nullopt;
    return shard.split(shard.rank() / ranks, shard.rank()); // checked_counts: ranks divide it
  }

  struct ControlGroups {
    control_type world;
    std::optional<control_type> shard;
  };
  // Collective over `control`, before any over `comm`: every rank sees every rank's place in the
  // data communicator, so all refuse a mismatch together instead of waiting in different splits.
  static Comm& same_ranks(Control& control, Comm& comm) {
    const std::int64_t mine[2] = {comm.rank(), comm.size()};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(control.size()));
    control.all_gather(std::span<const std::int64_t>(mine), all).wait();
    for (int r = 0; r < control.size(); ++r) {
      const std::int64_t rank = all[2 * std::size_t(r)], size = all[2 * std::size_t(r) + 1];
      require(rank == r && size == control.size(),
              "engine: rank " + std::to_string(r) + " of the host communicator (" +
                  std::to_string(control.size()) + " ranks) is rank " + std::to_string(rank) +
                  " of " + std::to_string(size) +
                  " in the data communicator; give the engine "
                  "two communicators of the same ranks in the same order",
              ErrorKind::mismatch);
    }
    return comm;
  }
  static ControlGroups make_control(Control& control) {
    ControlGroups groups{control_type(control.split(0, control.rank())), std::nullopt};
    if constexpr (Plan::group_ranks != 0)
      groups.shard.emplace(control.split(control.rank() / Plan::group_ranks, control.rank()));
    return groups;
  }

  counted_type world_;
  std::optional<counted_type> shard_, replica_, hpz_, tensor_;
  struct NoControl {};
  [[no_unique_address]] std::conditional_t<separate_control, ControlGroups, NoControl> control_;
};

} // namespace zero
