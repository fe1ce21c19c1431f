#pragma once
// The "activation_checkpointing" section of a DeepSpeed config, with DeepSpeed's defaults.
// Partitioned activations, CPU checkpointing and the contiguous checkpoint arena (ZeRO-R) are not
// built yet: the reader rejects a config that switches them on (see config/unbuilt.hpp).

#include <cstdint>
#include <optional>

namespace zero::config {

struct ActivationCheckpointingConfig {
  bool partition_activations = false;          // shard checkpoints across model-parallel ranks
  bool cpu_checkpointing = false;              // move the partitioned checkpoints to host memory
  bool contiguous_memory_optimization = false; // copy them into one pre-allocated arena
  std::optional<std::int64_t> number_checkpoints =
      std::nullopt; // sizes that arena; required with it
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  friend bool operator==(const ActivationCheckpointingConfig&,
                         const ActivationCheckpointingConfig&) = default;
};

} // namespace zero::config
