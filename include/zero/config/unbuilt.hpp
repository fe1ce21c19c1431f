#pragma once
// Options that DeepSpeed has and zero will have, but that are not built yet. A config asking for
// one must fail loudly rather than train without it: require_built() throws
// Error(unsupported) naming every such key. The JSON reader calls it unless told to accept them
// (the estimator does, since it models offload).

#include "zero/config/config.hpp"
#include "zero/core/error.hpp"

#include <string>
#include <vector>

namespace zero::config {

struct UnbuiltFeature {
  std::string key;    // the JSON path and the value that asks for it
  std::string reason; // what is missing
};

inline std::vector<UnbuiltFeature> unbuilt_features(const Config& config) {
  std::vector<UnbuiltFeature> found;
  // Offload is built: "nvme" is the NVMe tier (the engine's placement must say so too), "cpu" is
  // host memory, where the host engine keeps model states anyway. The activation-checkpointing
  // keys partition_activations and cpu_checkpointing are honoured by
  // ActivationCheckpointing::from_config where the loop has a tensor-parallel group, and refused
  // by name where it has none.
  const auto& zero_opt = config.zero_optimization;
  if (!zero_opt.allgather_partitions)
    found.push_back({"zero_optimization.allgather_partitions = false",
                     "parameters are always all-gathered after the step; the broadcast variant "
                     "is not built"});
  return found;
}

inline std::string describe(const std::vector<UnbuiltFeature>& features) {
  std::string text;
  for (const UnbuiltFeature& feature : features)
    text += "\n  " + feature.key + ": " + feature.reason;
  return text;
}

// Throws Error(unsupported) listing every option of `config` that asks for an unbuilt feature.
inline void require_built(const Config& config) {
  const std::vector<UnbuiltFeature> features = unbuilt_features(config);
  if (!features.empty()) fail(ErrorKind::unsupported, "not supported yet:" + describe(features));
}

} // namespace zero::config
