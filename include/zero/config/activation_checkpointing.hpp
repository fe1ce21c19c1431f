#pragma once
// The "activation_checkpointing" section of a DeepSpeed config, with DeepSpeed's defaults; what
// the loop does with it is residual/checkpoint_plan.hpp. Partitioned activations need model
// parallelism, which zero does not have: the reader refuses them (see config/unbuilt.hpp).

#include <cstdint>
#include <optional>

namespace zero::config {

struct ActivationCheckpointingConfig {
  bool given = false;                          // the config has the section: checkpoint the loop
  bool partition_activations = false;          // shard checkpoints across model-parallel ranks
  bool cpu_checkpointing = false;              // move the kept activations to another tier
  bool contiguous_memory_optimization = false; // keep them in one pre-allocated arena
  std::optional<std::int64_t> number_checkpoints =
      std::nullopt; // layer inputs kept; required with the arena (as in DeepSpeed)
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  friend bool operator==(const ActivationCheckpointingConfig&,
                         const ActivationCheckpointingConfig&) = default;
};

} // namespace zero::config
