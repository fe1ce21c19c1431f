#pragma once
// Activation checkpointing (ZeRO-R): instead of keeping every layer's activations from forward to
// backward, a loop keeps only the inputs of a few layers (the checkpoints) and, in backward,
// re-runs the forward of each segment from its kept input before running the segment's backward.
// With L layers cut into K segments, activation memory falls from L layers' worth to K inputs plus
// one segment's worth, least at K about sqrt(L), for the price of one more forward.
//
// ActivationCheckpointing holds the choices (DeepSpeed's "activation_checkpointing" section, or
// set by hand); CheckpointPlan cuts the layers into segments.

#include "zero/config/activation_checkpointing.hpp"
#include "zero/core/error.hpp"
#include "zero/residual/activation_partition.hpp"
#include "zero/residual/kept_input_tier.hpp"
#include "zero/shard/parameter.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace zero {

struct ActivationCheckpointing {
  // Layer inputs kept through forward, one per segment; 0: checkpointing off, everything is kept.
  std::size_t number_checkpoints = 0;
  // Kept inputs and segment buffers come from one arena sized by the first step, so that
  // allocations of mixed lifetimes cannot fragment memory step after step.
  bool contiguous_memory = false;
  // Where the kept inputs live between forward and backward: memory (null), or a tier below it,
  // e.g. KeptInputsOnNvme. Not owned.
  KeptInputTier* kept_inputs = nullptr;
  // Partitioned activations (Pa): each kept input held as this rank's slice over the group that
  // shares it, e.g. ActivationPartitionOver(groups.tensor()). With a tier too, the slices go
  // there. Not owned; null: whole inputs.
  ActivationPartition* partition = nullptr;
  // Over a stream space (a device): the kept inputs in pinned host memory between forward and
  // backward rather than the device's, copied there and back on the loop's stream (ZeRO-R's CPU
  // checkpointing, for whole inputs). Over host memory there is nothing to move, and it is refused.
  bool kept_inputs_in_host_memory = false;
  // With a tier: wait for its transfers at every segment boundary (a debugging aid; it gives up
  // the overlap).
  bool synchronize_boundary = false;
  // Time forward, recomputation and backward, per step (CheckpointedLayers::stats()).
  bool profile = false;

  // DeepSpeed's section for a loop of `layers` layers: number_checkpoints, or about sqrt(layers)
  // (the memory optimum) when it is absent. Checkpointing is off when the config has no such
  // section. partition_activations and cpu_checkpointing need the group the activations are
  // replicated over, `partition` (the tensor-parallel group); without one they are refused by
  // name. cpu_checkpointing moves the partitioned slices to host memory (DeepSpeed: "if
  // partition_activations is enabled"); on the host engine they are there already, so it asks for
  // nothing more (the tier below host memory, NVMe, is set in code through kept_inputs).
  static ActivationCheckpointing from_config(const config::ActivationCheckpointingConfig& c,
                                             std::size_t layers,
                                             ActivationPartition* partition = nullptr) {
    ActivationCheckpointing a;
    if (!c.given) return a;
    const auto refuse_without_group = [&](bool asked, const char* key) {
      require(!asked || partition,
              std::string("activation_checkpointing.") + key +
                  " = true: it splits the kept activations across the tensor-parallel group, and "
                  "this loop has none (every rank holds whole activations); remove the key or "
                  "give the loop its group",
              ErrorKind::unsupported);
    };
    refuse_without_group(c.partition_activations, "partition_activations");
    refuse_without_group(c.cpu_checkpointing, "cpu_checkpointing");
    a.number_checkpoints =
        c.number_checkpoints ? static_cast<std::size_t>(*c.number_checkpoints) : sqrt_of(layers);
    a.contiguous_memory = c.contiguous_memory_optimization;
    a.synchronize_boundary = c.synchronize_checkpoint_boundary;
    a.profile = c.profile;
    if (c.partition_activations) a.partition = partition;
    return a;
  }

  // About sqrt(layers), at least 1: the number of checkpoints that minimizes memory.
  static std::size_t sqrt_of(std::size_t layers) {
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::lround(std::sqrt(layers))));
  }
};

// The layers of a loop cut into segments of nearly equal length, the longer ones first. Without
// checkpointing the whole loop is one segment, kept from forward to backward.
class CheckpointPlan {
 public:
  CheckpointPlan(std::size_t layers, std::size_t number_checkpoints) : layers_(layers) {
    require(layers > 0, "activation checkpointing: a loop without layers");
    const std::size_t count =
        number_checkpoints == 0 ? 1 : std::min<std::size_t>(number_checkpoints, layers);
    std::size_t begin = 0;
    for (std::size_t s = 0; s < count; ++s) {
      const std::size_t length = layers / count + (s < layers % count ? 1 : 0);
      segments_.push_back({begin, begin + length});
      begin += length;
    }
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t segment_count() const noexcept { return segments_.size(); }
  // The layers of segment s, [begin, end).
  Range segment(std::size_t s) const { return segments_.at(s); }
  std::size_t longest_segment() const noexcept { return segments_.front().size(); }
  // Whether backward runs any layer's forward again (the last segment is kept from forward).
  bool recomputes() const noexcept { return segments_.size() > 1; }

 private:
  std::size_t layers_;
  std::vector<Range> segments_;
};

} // namespace zero
