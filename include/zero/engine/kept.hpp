#pragma once
// Kept<sharded, Partitioner, Space>: how a store keeps one kind of model state. ModelStates decides
// it from the plan, once, and hands it to each store as a type, so that no store reads the plan:
//   - sharded: this rank keeps its block of every layer of the model's layout (the plan's
//     partitioner over the shard group);
//   - not sharded: every rank keeps all of it, on the replica layout (each layer's parameters in
//     order).
// in memory space (or on the tier) Space.

#include "zero/engine/model_layout.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/shard_layout.hpp"
#include "zero/stage/plan.hpp"

#include <concepts>
#include <memory>

namespace zero {

namespace detail {
// The ShardedTensor policy of a state kept sharded or whole (chosen lazily: a replica on the NVMe
// tier is not a policy at all).
template <bool IsSharded, class Partitioner, class Space>
struct kept_policy {
  using type = Sharded<Partitioner, Space>;
};
template <class Partitioner, class Space>
struct kept_policy<false, Partitioner, Space> {
  using type = ReplicatedIn<Space>;
};
} // namespace detail

template <bool IsSharded, class Partitioner, class Space>
struct Kept {
  static constexpr bool sharded = IsSharded;
  using space = Space;
  // The ShardedTensor policy of a state kept this way.
  using policy = typename detail::kept_policy<IsSharded, Partitioner, Space>::type;
  // The layout the state's blocks follow, and the rank whose blocks this rank keeps.
  static const std::shared_ptr<const ShardLayout>& layout(const ModelLayout& model) noexcept {
    return IsSharded ? model.sharded : model.replica;
  }
  static int rank(const ModelLayout& model) noexcept { return IsSharded ? model.rank : 0; }
};

template <class K>
concept KeptState = requires {
  { K::sharded } -> std::convertible_to<bool>;
  typename K::space;
  typename K::policy;
};

// What a plan keeps how, in Space.
template <ShardingPlanType Plan, class Space>
using KeptParameters = Kept<Plan::parameters, typename Plan::partitioner, Space>;
template <ShardingPlanType Plan, class Space>
using KeptGradients = Kept<Plan::gradients, typename Plan::partitioner, Space>;
template <ShardingPlanType Plan, class Space>
using KeptOptimizerStates = Kept<Plan::optimizer_states, typename Plan::partitioner, Space>;

} // namespace zero
