#pragma once
// A sharding plan says which model states are split across ranks: optimizer states (fp32 master
// weights and moments), gradients, parameters. ZeRO's stages are plans:
//
//   Stage<0> = ShardingPlan<>                                          plain data parallelism
//   Stage<1> = ShardingPlan<shard_optimizer_states>                    4Ψ + KΨ/N per rank
//   Stage<2> = ShardingPlan<shard_optimizer_states, shard_gradients>   2Ψ + (2+K)Ψ/N
//   Stage<3> = ShardingPlan<..., shard_parameters>                     (4+K)Ψ/N
//
// Other plans are built from the same pieces: `shard_within<8>` shards among groups of 8
// consecutive ranks (a node, say) and replicates across groups; `partition_with<P>` picks the
// partitioner. A plan is checked when it is used: sharding gradients without sharding the optimizer
// states that consume them, or parameters without gradients, is a compile error.

#include "zero/core/platform.hpp"
#include "zero/shard/flat_contiguous.hpp"
#include "zero/shard/partitioner.hpp"

#include <concepts>
#include <type_traits>

namespace zero {

struct shard_optimizer_states {};
struct shard_gradients {};
struct shard_parameters {};

// Shard among groups of `Ranks` consecutive ranks only; the groups hold replicas.
template <int Ranks>
struct shard_within {
  static_assert(Ranks >= 1, "zero: shard_within<N> needs N >= 1");
  static constexpr int ranks = Ranks;
};

// The partitioner that places each layer's elements on the ranks of the shard group.
template <Partitioner P>
struct partition_with {
  using type = P;
};

namespace detail {
template <class T>
struct shard_within_ranks : std::integral_constant<int, -1> {};
template <int N>
struct shard_within_ranks<shard_within<N>> : std::integral_constant<int, N> {};
template <class T>
struct is_partition_with : std::false_type {};
template <class P>
struct is_partition_with<partition_with<P>> : std::true_type {};

template <class T>
inline constexpr bool is_plan_piece =
    std::is_same_v<T, shard_optimizer_states> || std::is_same_v<T, shard_gradients> ||
    std::is_same_v<T, shard_parameters> || shard_within_ranks<T>::value >= 0 ||
    is_partition_with<T>::value;

template <class... Pieces>
constexpr int shard_group_ranks() {
  int ranks = 0; // 0: the whole communicator
  ((ranks = shard_within_ranks<Pieces>::value >= 0 ? shard_within_ranks<Pieces>::value : ranks),
   ...);
  return ranks;
}

template <class... Pieces>
struct plan_partitioner {
  using type = FlatContiguous;
};
template <class P, class... Rest>
struct plan_partitioner<partition_with<P>, Rest...> {
  using type = P;
};
template <class First, class... Rest>
struct plan_partitioner<First, Rest...> : plan_partitioner<Rest...> {};
} // namespace detail

template <class... Pieces>
struct ShardingPlan {
  static_assert((detail::is_plan_piece<Pieces> && ...),
                "zero: a ShardingPlan is built from shard_optimizer_states, shard_gradients, "
                "shard_parameters, shard_within<N> and partition_with<P>");

  static constexpr bool optimizer_states = (std::is_same_v<Pieces, shard_optimizer_states> || ...);
  static constexpr bool gradients = (std::is_same_v<Pieces, shard_gradients> || ...);
  static constexpr bool parameters = (std::is_same_v<Pieces, shard_parameters> || ...);
  // Ranks per shard group; 0 means all ranks of the communicator.
  static constexpr int group_ranks = detail::shard_group_ranks<Pieces...>();
  using partitioner = typename detail::plan_partitioner<Pieces...>::type;

  // The ZeRO stage this plan corresponds to (for reports and the memory formula).
  static constexpr int stage = parameters ? 3 : gradients ? 2 : optimizer_states ? 1 : 0;
};

namespace detail {
template <int N>
struct stage_plan;
template <>
struct stage_plan<0> {
  using type = ShardingPlan<>;
};
template <>
struct stage_plan<1> {
  using type = ShardingPlan<shard_optimizer_states>;
};
template <>
struct stage_plan<2> {
  using type = ShardingPlan<shard_optimizer_states, shard_gradients>;
};
template <>
struct stage_plan<3> {
  using type = ShardingPlan<shard_optimizer_states, shard_gradients, shard_parameters>;
};
} // namespace detail

template <int N>
requires(N >= 0 && N <= 3) using Stage = typename detail::stage_plan<N>::type;

// Anything with the members of ShardingPlan is a plan (users may write their own struct).
template <class P>
concept ShardingPlanType = requires {
  { P::optimizer_states } -> std::convertible_to<bool>;
  { P::gradients } -> std::convertible_to<bool>;
  { P::parameters } -> std::convertible_to<bool>;
  { P::group_ranks } -> std::convertible_to<int>;
  { P::stage } -> std::convertible_to<int>;
  typename P::partitioner;
  requires Partitioner<typename P::partitioner>;
};

// The rules a plan must follow, as readable compile errors at the point of use.
template <ShardingPlanType P>
constexpr bool check_plan() {
  static_assert(!P::gradients || P::optimizer_states,
                "zero: this plan shards gradients but not the optimizer states that consume them; "
                "add shard_optimizer_states (ZeRO stage 2 shards both)");
  static_assert(!P::parameters || P::gradients,
                "zero: this plan shards parameters but not gradients; a rank holding 1/N of the "
                "parameters cannot keep all gradients (ZeRO stage 3 shards all three)");
  return true;
}

} // namespace zero
