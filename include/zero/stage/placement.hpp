#pragma once
// A placement says where each kind of model state lives, and which execution space runs the
// engine's kernels. It is composed from pieces at compile time, like a ShardingPlan:
//
//   zero::Placement<>                                    everything in host memory
//   zero::Placement<zero::optimizer_states_in<zero::nvme>>        ZeRO-Infinity, optimizer states
//   zero::Placement<zero::optimizer_states_in<zero::nvme>,
//                   zero::parameters_in<zero::nvme>>              ... and stage 3's parameter
//                   shards
//
// Kinds: parameters (the compute copy, or its shard under stage 3), gradients, optimizer states
// (fp32 master weights and the optimizer's moments). Places: a memory space (host, pinned_host,
// cuda) or the NVMe tier. A memory space can stand for a whole placement: the engine takes
// zero::host as Placement<> (placement_of). check_placement() turns the combinations that cannot
// work into compile errors that say why.

#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/nvme.hpp"
#include "zero/core/platform.hpp"
#include "zero/stage/plan.hpp"

#include <concepts>
#include <type_traits>

namespace zero {

template <StorageSpace Space>
struct parameters_in {
  using space = Space;
};
template <StorageSpace Space>
struct gradients_in {
  using space = Space;
};
// fp32 master weights and optimizer moments.
template <StorageSpace Space>
struct optimizer_states_in {
  using space = Space;
};
template <ExecutionSpace E>
struct execute_on {
  using space = E;
};

namespace detail {
template <template <class> class Piece, class Default, class... Pieces>
struct placed {
  using type = Default;
};
template <template <class> class Piece, class Default, class S, class... Rest>
struct placed<Piece, Default, Piece<S>, Rest...> {
  using type = S;
};
template <template <class> class Piece, class Default, class First, class... Rest>
struct placed<Piece, Default, First, Rest...> : placed<Piece, Default, Rest...> {};

template <class T, template <class> class Piece>
inline constexpr bool is_piece = false;
template <class S, template <class> class Piece>
inline constexpr bool is_piece<Piece<S>, Piece> = true;
template <template <class> class Piece, class... Pieces>
constexpr bool at_most_once() {
  return ((is_piece<Pieces, Piece> ? 1 : 0) + ... + 0) <= 1;
}
template <class T>
inline constexpr bool is_placement_piece =
    is_piece<T, parameters_in> || is_piece<T, gradients_in> || is_piece<T, optimizer_states_in> ||
    is_piece<T, execute_on>;
} // namespace detail

template <class... Pieces>
struct Placement {
  static_assert((detail::is_placement_piece<Pieces> && ...),
                "zero: a Placement is built from parameters_in<S>, gradients_in<S>, "
                "optimizer_states_in<S> and execute_on<E>");
  static_assert(detail::at_most_once<parameters_in, Pieces...>() &&
                    detail::at_most_once<gradients_in, Pieces...>() &&
                    detail::at_most_once<optimizer_states_in, Pieces...>() &&
                    detail::at_most_once<execute_on, Pieces...>(),
                "zero: a Placement names each kind of state (and the execution space) at most "
                "once");
  using execution_space = typename detail::placed<execute_on, HostThreads, Pieces...>::type;
  using parameters = typename detail::placed<parameters_in, typename execution_space::memory_space,
                                             Pieces...>::type;
  using gradients = typename detail::placed<gradients_in, typename execution_space::memory_space,
                                            Pieces...>::type;
  using optimizer_states =
      typename detail::placed<optimizer_states_in, typename execution_space::memory_space,
                              Pieces...>::type;
};

template <class P>
concept PlacementType = requires {
  typename P::execution_space;
  typename P::parameters;
  typename P::gradients;
  typename P::optimizer_states;
  requires ExecutionSpace<typename P::execution_space>;
  requires StorageSpace<typename P::parameters> && StorageSpace<typename P::gradients> &&
      StorageSpace<typename P::optimizer_states>;
};

namespace detail {
template <class Where>
struct placement_of {
  using type = Where;
};
template <MemorySpace M>
struct placement_of<M> {
  using type = Placement<parameters_in<M>, gradients_in<M>, optimizer_states_in<M>>;
};
} // namespace detail

// A memory space as a placement (every kind there), or the placement itself.
template <class Where>
using placement_of = typename detail::placement_of<Where>::type;

namespace detail {
template <class Exec, class Space>
inline constexpr bool runs_on = std::same_as<Space, nvme> || can_access<Exec, Space>;
// Beside a device space, the optimizer states may stay on the host (ZeRO-Offload): the host's
// threads update them (offload/offloaded_optimizer_store.hpp).
template <class Exec, class Space>
inline constexpr bool updated_from = runs_on<Exec, Space> || Space::host_accessible;
// Whether a store keeping its states in `Space` beside execution space Exec is an offloaded one:
// Exec runs on a device, and the states are on the host (in its memory or on the NVMe tier).
template <class Space, class Exec>
inline constexpr bool offloaded_from =
    !Exec::memory_space::host_accessible && !std::same_as<Space, typename Exec::memory_space>;
// Stage 3's parameter shards in host memory beside a device space (ZeRO-Infinity's offload_param):
// each block is copied to the device before its layer is gathered there
// (offload/offloaded_parameters.hpp).
template <class Space, class Exec>
inline constexpr bool parameters_streamed_from =
    offloaded_from<Space, Exec> && !std::same_as<Space, nvme> && Space::host_accessible;
} // namespace detail

// The rules a placement must follow for a plan, as readable compile errors at the point of use.
template <ShardingPlanType Plan, PlacementType P>
constexpr bool check_placement() {
  using Exec = typename P::execution_space;
  constexpr bool streamed = detail::parameters_streamed_from<typename P::parameters, Exec>;
  static_assert((streamed || detail::runs_on<Exec, typename P::parameters>)&&detail::runs_on<
                    Exec, typename P::gradients> &&
                    detail::updated_from<Exec, typename P::optimizer_states>,
                "zero: model states must be in memory their execution space reaches: device "
                "memory needs execute_on<CudaStreamSpace> (docs/gpu-engine.md), host or pinned "
                "host memory a host space (HostThreads, HostStreamSpace); beside a device space "
                "only the optimizer states may be on the host (ZeRO-Offload, "
                "docs/zero-offload.md), and under stage 3 the parameters with them "
                "(offload_param, docs/zero-infinity-gpu.md)");
  static_assert(!streamed || Plan::parameters,
                "zero: parameters in host memory beside a device space (offload_param) need ZeRO "
                "stage 3 (shard_parameters): under stages 0-2 every rank reads the whole compute "
                "copy in every forward and backward (DeepSpeed's offload_param is stage 3 only as "
                "well)");
  static_assert(!streamed || detail::offloaded_from<typename P::optimizer_states, Exec>,
                "zero: parameters in host memory beside a device space (offload_param) need the "
                "optimizer states offloaded too (optimizer_states_in<pinned_host> or <nvme>): the "
                "host's step writes the new parameter shards straight into their host memory, "
                "never through the device's");
  static_assert(!std::same_as<typename P::gradients, nvme>,
                "zero: gradients cannot be placed on NVMe: backward writes them and their "
                "reduction runs while backward does (DeepSpeed offloads no gradients to NVMe "
                "either); keep them in memory");
  static_assert(!std::same_as<typename P::parameters, nvme> || Plan::parameters,
                "zero: parameters on NVMe need ZeRO stage 3 (shard_parameters): under stages 0-2 "
                "every rank reads the whole compute copy in every forward and backward "
                "(DeepSpeed's offload_param is stage 3 only as well)");
  static_assert(!std::same_as<typename P::parameters, nvme> ||
                    std::same_as<typename P::optimizer_states, nvme>,
                "zero: parameters on NVMe need the optimizer states on NVMe too: the optimizer "
                "step writes the new parameter shards in the aligned sub-groups of its NVMe "
                "pipeline, and keeping 12 bytes per parameter of optimizer state in memory while "
                "moving the 2 or 4 bytes of the parameter to disk would save little");
  static_assert(!std::same_as<typename P::optimizer_states, nvme> || Plan::optimizer_states,
                "zero: optimizer states on NVMe need a plan that shards them (stage 1, 2 or 3): "
                "otherwise every rank would write the same whole copy to its disk");
  return true;
}

} // namespace zero
