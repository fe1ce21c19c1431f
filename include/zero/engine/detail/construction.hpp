#pragma once
// What an Engine checks while it is built: that its template arguments fit together (with
// "zero: ..." messages that name the missing concept), that the parameters come layer by layer,
// that every rank was given the options the collectives depend on, and that a DeepSpeed config's
// offload devices match the placement type.

#include "zero/comm/communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/nvme.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/typed_states.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/shard/flat_contiguous.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/partitioner.hpp"
#include "zero/shard/verify.hpp"
#include "zero/stage/placement.hpp"
#include "zero/stage/plan.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::detail {

// The communicator of the engine's own collectives, which move host values
// (engine/rank_groups.hpp): Comm itself when it moves host memory; for a communicator of device
// memory, the host communicator it names (StagedCommunicator's and NcclCommunicator's host_type),
// given to the engine beside it.
template <class Comm>
struct control_communicator {
  using type = Comm;
};
template <class Comm>
requires(!HostAccessibleSpace<typename Comm::memory_space>) && requires {
  typename Comm::host_type;
}
struct control_communicator<Comm> {
  using type = typename Comm::host_type;
};
template <class Comm>
using control_communicator_t = typename control_communicator<Comm>::type;

// True, or a compile error that says which requirement the engine's arguments miss.
template <class Plan, class Comm, class Placement>
consteval bool engine_arguments_fit() {
  static_assert(ReducingCommunicator<Comm>,
                "zero: the engine reduces gradients: its communicator needs all_reduce and "
                "reduce_scatter (zero::ReducingCommunicator)");
  static_assert(GatheringCommunicator<Comm>,
                "zero: the engine all-gathers parameters (stage 3 before each layer's compute, "
                "stages 1/2 after the step) and broadcasts the initial weights: its communicator "
                "needs all_gather and broadcast (zero::GatheringCommunicator)");
  static_assert(Communicator<Comm>,
                "zero: the engine gives itself its own groups with split(color, key) and needs "
                "barrier() (zero::Communicator)");
  static_assert(PlacementType<Placement>,
                "zero: the engine's third parameter is a memory space (zero::host) or a "
                "zero::Placement<...>");
  static_assert(check_plan<Plan>() && check_placement<Plan, Placement>());
  static_assert(EqualSlices<typename Plan::partitioner> || VariableCountCommunicator<Comm>,
                "zero: the plan's partitioner gives ranks blocks of different sizes, which the "
                "engine reduces and gathers with per-rank counts; this communicator has no "
                "reduce_scatter / all_gather with counts (zero::VariableCountCommunicator)");
  using Data = typename Comm::memory_space;
  using Exec = typename Placement::execution_space;
  static_assert(HostAccessibleSpace<Data> ? HostAccessibleSpace<typename Exec::memory_space>
                                          : std::same_as<Data, typename Exec::memory_space>,
                "zero: the engine's communicator moves the model states, which are in its "
                "execution space's memory: a host communicator (MpiCommunicator, "
                "SelfCommunicator) for host memory, a communicator of the device's memory "
                "(StagedCommunicator, NcclCommunicator) for execute_on<CudaStreamSpace>");
  static_assert(HostAccessibleSpace<typename control_communicator_t<Comm>::memory_space>,
                "zero: the engine's own collectives (the layout's and the options' agreement, "
                "set_layer's broadcast, the norm, checkpoints) move host values: a communicator "
                "of device memory must name the host communicator given beside it (host_type)");
  return true;
}

inline EngineOptions validated(EngineOptions o) {
  o.validate();
  return o;
}

// The plan's partitioner. With 8-bit moments every rank's block of a layer starts on a multiple
// of the quantization block, counted from the layer's element 0, which is also where a rank that
// keeps the layer whole starts its blocks: every stage quantizes the same blocks of 2048.
template <class Plan>
typename Plan::partitioner partitioner_for(const EngineOptions& options) {
  typename Plan::partitioner partitioner{};
  if (options.moments == MomentStorage::blockwise_8bit) {
    if constexpr (std::same_as<typename Plan::partitioner, FlatContiguous>)
      partitioner.alignment = std::lcm(partitioner.alignment, quantized_moment_block);
    else
      fail(ErrorKind::unsupported,
           "engine: 8-bit moments (EngineOptions::moments) need the flat_contiguous partitioner, "
           "whose shards can start on whole blocks of " +
               std::to_string(quantized_moment_block) + " elements; this plan's is " +
               partitioner.describe());
  }
  return partitioner;
}

// The model's sharded layout; parameters must come layer by layer. Built inside the layout's
// agreement: an error on one rank (a refused partitioner) reaches every rank there, and ranks
// given different moment storage see their layouts' alignments differ.
template <class Plan, class Counted>
ShardLayout make_layout_checked(Counted& comm, std::vector<ParameterSpec> params,
                                const EngineOptions& options) {
  for (std::size_t i = 1; i < params.size(); ++i)
    require(params[i].layer >= params[i - 1].layer,
            "engine: parameters must be registered layer by layer (layer ids ascending)");
  for (auto& p : params)
    p.dtype = DType::float32; // the layout counts elements; the stores pick their types
  return detail::agreed_layout(comm, [&] {
    return partitioner_for<Plan>(options).partition(std::span<const ParameterSpec>(params),
                                                    comm.size());
  });
}

// Collective: throws on every rank, naming the setting, unless all ranks share the settings the
// collectives depend on.
template <class Counted>
void agree_on_options(Counted& world, const EngineOptions& options) {
  const auto settings = options.shared_settings();
  std::vector<std::int64_t> mine;
  mine.reserve(settings.size());
  for (const auto& [name, value] : settings)
    mine.push_back(static_cast<std::int64_t>(value));
  std::vector<std::int64_t> all(mine.size() * std::size_t(world.size()));
  world.all_gather(std::span<const std::int64_t>(mine), all).wait();
  for (int r = 1; r < world.size(); ++r)
    for (std::size_t k = 0; k < mine.size(); ++k)
      if (all[std::size_t(r) * mine.size() + k] != all[k])
        fail_on_every_rank(ErrorKind::mismatch,
                           "engine: rank " + std::to_string(r) +
                               " was given a different EngineOptions::" + settings[k].first +
                               " than rank 0; every rank must pass the same options");
}

// A DeepSpeed config names where states go; the placement type decides. They must agree ("cpu"
// is host memory, where a host engine keeps them anyway, and a device engine only when its
// placement offloads them). The options were agreed (offload_optimizer and offload_param among
// them, EngineOptions::shared_settings), so every rank refuses alike.
inline void check_requested_place(config::OffloadDevice asked, bool on_nvme, bool on_device,
                                  const char* key, const char* placement,
                                  const char* offloaded_placement, const char* doc) {
  if (asked != config::OffloadDevice::none && on_device)
    fail_on_every_rank(ErrorKind::unsupported,
                       std::string(key) + " = \"" + config::to_string(asked) +
                           "\", but this engine keeps them in device memory: " +
                           offloaded_placement + " (" + doc + ")");
  if (asked == config::OffloadDevice::nvme && !on_nvme)
    fail_on_every_rank(
        ErrorKind::unsupported,
        std::string(key) +
            " = \"nvme\", but this engine keeps them in memory: give it the placement " +
            placement + " (and include <zero/offload/nvme_stores.hpp>)");
  if (asked == config::OffloadDevice::cpu && on_nvme)
    fail_on_every_rank(ErrorKind::unsupported,
                       std::string(key) +
                           " = \"cpu\", but this engine's placement keeps them on NVMe");
}

template <class Space>
constexpr bool in_device_memory() {
  if constexpr (std::same_as<Space, nvme>)
    return false;
  else
    return !Space::host_accessible;
}

// The placement's requested places and compute type, checked against the options (a config's
// offload devices, its fp16 or bf16 section).
template <class Placement>
void check_requested_places(const EngineOptions& options) {
  constexpr bool device = !Placement::execution_space::memory_space::host_accessible;
  check_requested_place(options.offload_optimizer,
                        std::same_as<typename Placement::optimizer_states, nvme>,
                        in_device_memory<typename Placement::optimizer_states>(),
                        "zero_optimization.offload_optimizer.device",
                        device ? "zero::Placement<zero::execute_on<...>, "
                                 "zero::optimizer_states_in<zero::nvme>>"
                               : "zero::Placement<zero::optimizer_states_in<zero::nvme>>",
                        "offload them with zero::optimizer_states_in<zero::host> (or "
                        "zero::nvme) in the placement",
                        "docs/zero-offload.md");
  check_requested_place(options.offload_param, std::same_as<typename Placement::parameters, nvme>,
                        in_device_memory<typename Placement::parameters>(),
                        "zero_optimization.offload_param.device",
                        device ? "zero::Placement<zero::execute_on<...>, "
                                 "zero::parameters_in<zero::nvme>, "
                                 "zero::optimizer_states_in<zero::nvme>> (stage 3)"
                               : "zero::Placement<zero::optimizer_states_in<zero::nvme>, "
                                 "zero::parameters_in<zero::nvme>> (stage 3)",
                        "keep stage 3's parameter shards in host memory with "
                        "zero::parameters_in<zero::pinned_host> in the placement, the optimizer "
                        "states offloaded with them (and include "
                        "<zero/offload/offloaded_parameters.hpp>)",
                        "docs/zero-infinity-gpu.md");
}

} // namespace zero::detail
