#pragma once
// RankGroups: the communicators an engine talks through, made from the caller's at construction.
// The world (initial broadcasts, the options' agreement), the shard group that splits the model
// states (all ranks, or `shard_within<N>` consecutive ranks) and, for shard_within plans, the
// replica group of ranks holding the same shard. Each counts its own traffic, so a step's
// communication can be shown next to the ZeRO paper's volumes.

#include "zero/comm/communicator.hpp"
#include "zero/comm/counting_communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/stage/plan.hpp"

#include <optional>
#include <string>

namespace zero {

template <ShardingPlanType Plan, Communicator Comm>
class RankGroups {
 public:
  using counted_type = CountingCommunicator<Comm>;

  // hpz_ranks > 1: also the groups of that many consecutive ranks of the shard group (hpZ).
  explicit RankGroups(Comm& comm, int hpz_ranks = 1)
      : world_(comm.split(0, comm.rank())), shard_(make_shard_group(comm)),
        replica_(make_replica_group(comm)), hpz_(make_hpz_group(shard(), hpz_ranks)) {}

  counted_type& world() noexcept { return world_; }
  counted_type& shard() noexcept { return shard_ ? *shard_ : world_; }
  const counted_type& shard() const noexcept { return shard_ ? *shard_ : world_; }
  // The ranks holding the same shard, or null when every rank holds its own.
  counted_type* replica() noexcept { return replica_ ? &*replica_ : nullptr; }
  // The ranks sharing stage 3's secondary weight copy (hpZ), or null without one.
  counted_type* hpz() noexcept { return hpz_ ? &*hpz_ : nullptr; }

  // Everything communicated since construction, all groups.
  CommStats total() const {
    CommStats total = world_.stats();
    if (shard_) total += shard_->stats();
    if (replica_) total += replica_->stats();
    if (hpz_) total += hpz_->stats();
    return total;
  }
  // What the hpZ groups communicated (within a node when they are nodes), part of total().
  CommStats hpz_total() const { return hpz_ ? hpz_->stats() : CommStats{}; }

 private:
  static std::optional<counted_type> make_shard_group(Comm& comm) {
    if constexpr (Plan::group_ranks == 0) {
      return std::nullopt; // the world is the shard group
    } else {
      require(comm.size() % Plan::group_ranks == 0,
              "engine: shard_within<" + std::to_string(Plan::group_ranks) +
                  "> needs a multiple of " + std::to_string(Plan::group_ranks) + " ranks, not " +
                  std::to_string(comm.size()));
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
    require(shard.size() % ranks == 0,
            "engine: hpz_partition_size (zero_hpz_partition_size) " + std::to_string(ranks) +
                " does not divide the shard group of " + std::to_string(shard.size()) + " ranks");
    return shard.split(shard.rank() / ranks, shard.rank());
  }

  counted_type world_;
  std::optional<counted_type> shard_, replica_, hpz_;
};

} // namespace zero
