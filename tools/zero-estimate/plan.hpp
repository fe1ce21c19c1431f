#pragma once
// What zero-estimate is asked (Plan: the flags and the config resolved), and what follows from it
// before anything is printed: each stage's query, the largest model over the sized tiers, and the
// offload placements a stage offers.

#include "zero/estimate/activation_memory.hpp"
#include "zero/estimate/communication.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero_estimate {

namespace est = zero::estimate;

struct Plan {
  std::optional<double> parameters; // Ψ of the whole model
  std::int64_t data_parallel = 1;
  std::int64_t tensor_parallel = 1;
  std::optional<est::TransformerShape> shape;
  std::int64_t recomputed_layers = 0;
  bool recomputed_from_checkpoints = false; // R is what --checkpoints recomputes
  // Activation checkpointing's K, capped at L (default L: every layer checkpointed), as asked.
  std::int64_t checkpoints = 0;
  std::optional<std::int64_t> checkpoints_asked;
  double activation_bytes = 2; // bytes per activation element
  bool activation_bytes_given = false;
  std::string data_parallel_origin;
  est::BytesPerParameter bytes;
  std::string bytes_origin;
  est::Tier optimizer_offload = est::Tier::device;
  double optimizer_offload_ratio = 1; // the share of them offload moves
  est::Tier parameter_offload = est::Tier::device;
  std::optional<double> device_memory;
  std::optional<double> host_memory, nvme_memory; // per rank; absent: the tier bounds nothing
  std::vector<int> stages;

  est::Capacity capacity() const {
    est::Capacity c;
    if (device_memory) c.device = *device_memory;
    if (host_memory) c.cpu = *host_memory;
    if (nvme_memory) c.nvme = *nvme_memory;
    return c;
  }
  bool sizes_tiers_below_the_device() const { return host_memory || nvme_memory; }

  // How a tensor-parallel group holds Ψ: by the transformer's layout, else all of it split.
  est::ParameterSplit split() const {
    return shape ? est::transformer_parameters(*shape, tensor_parallel)
                 : est::all_split(parameters.value_or(0), tensor_parallel);
  }
  // The tensor-parallel all-reduces, of activations (in the parameters' dtype by default).
  est::TensorParallelCommunication tensor_communication() const {
    return est::tensor_parallel_communication(*shape, tensor_parallel, recomputed_layers,
                                              activation_bytes);
  }
  // The activation memory of each scheme, at K checkpoints.
  est::ActivationMemoryPerRank activations(est::ActivationScheme scheme) const {
    return est::activation_memory({*shape, tensor_parallel, scheme, checkpoints, activation_bytes});
  }
  // The schemes shown: Pa only where there is a group to partition over.
  std::vector<est::ActivationScheme> activation_schemes() const {
    using enum est::ActivationScheme;
    if (tensor_parallel > 1) return {none, checkpointed, partitioned, partitioned_off_device};
    return {none, checkpointed};
  }
  // Pa's all-gathers, against the all-reduces of a step that recomputes what K checkpoints do.
  bool shows_partition_communication() const {
    return shape && tensor_parallel > 1 && checkpoints > 1;
  }
  est::PartitionedActivationCommunication partition_communication() const {
    return est::partitioned_activation_communication(*shape, tensor_parallel, checkpoints,
                                                     activation_bytes);
  }
  std::int64_t checkpointed_recomputation() const {
    return est::recomputed_layers(shape->layers, checkpoints);
  }
  est::TensorParallelCommunication checkpointed_tensor_communication() const {
    return est::tensor_parallel_communication(*shape, tensor_parallel, checkpointed_recomputation(),
                                              activation_bytes);
  }
  bool shows_tensor_communication() const { return shape && tensor_parallel > 1; }

  // The rank's parameters over N_d. Offload applies to the stages that have it: optimizer
  // states from stage 1, parameters at 3.
  est::ModelStateQuery query(int stage) const {
    return {split().per_rank(),
            data_parallel,
            stage,
            bytes,
            stage >= 1 ? optimizer_offload : est::Tier::device,
            stage == 3 ? parameter_offload : est::Tier::device,
            stage >= 1 && optimizer_offload != est::Tier::device ? optimizer_offload_ratio : 1.0};
  }
  bool offloads() const {
    return optimizer_offload != est::Tier::device || parameter_offload != est::Tier::device;
  }
};

// The largest Ψ of a query over the plan's tiers: a rank's share times T, every parameter taken
// as split.
inline est::LargestModel largest_model(const Plan& plan, const est::ModelStateQuery& query) {
  est::LargestModel largest = est::largest_model(plan.capacity(), query);
  largest.parameters *= static_cast<double>(plan.tensor_parallel);
  return largest;
}

inline double largest_model(const Plan& plan, int stage) {
  return largest_model(plan, plan.query(stage)).parameters;
}

// The placements ZeRO-Offload and ZeRO-Infinity offer, each at ratio 1: where the optimizer
// states (and from stage 2 their gradients) and where the parameters live.
struct Placement {
  const char* name;
  est::Tier optimizer_states, parameters;
};

// The placements a stage has whose tiers the plan sizes: optimizer offload from stage 1,
// parameter offload at 3; host rows with --host-memory, NVMe rows with --nvme-memory.
inline std::vector<Placement> placements(const Plan& plan, int stage) {
  using est::Tier;
  std::vector<Placement> rows{{"device only", Tier::device, Tier::device}};
  if (stage >= 1 && plan.host_memory)
    rows.push_back({"optimizer states in host memory", Tier::cpu, Tier::device});
  if (stage >= 1 && plan.nvme_memory)
    rows.push_back({"optimizer states on NVMe", Tier::nvme, Tier::device});
  if (stage == 3 && plan.host_memory)
    rows.push_back({"parameters and optimizer states in host memory", Tier::cpu, Tier::cpu});
  if (stage == 3 && plan.nvme_memory)
    rows.push_back({"parameters and optimizer states on NVMe", Tier::nvme, Tier::nvme});
  return rows;
}

inline est::ModelStateQuery placement_query(const Plan& plan, int stage, const Placement& p) {
  est::ModelStateQuery query = plan.query(stage);
  query.optimizer_offload = p.optimizer_states;
  query.parameter_offload = p.parameters;
  query.optimizer_offload_ratio = 1;
  return query;
}

// The stage the placements are shown at: the one asked for, else 3, where every placement is.
inline int placement_stage(const Plan& plan) {
  return plan.stages.size() == 1 ? plan.stages.front() : 3;
}

} // namespace zero_estimate
