#pragma once
// The NvmeTierOptions of one store's tier: the engine's NVMe settings, the store's own nvme_path,
// and a directory of its own under it (a parameter store and an optimizer store may share a path).

#include "zero/core/error.hpp"
#include "zero/engine/offload_options.hpp"
#include "zero/nvme/nvme_tier.hpp"

#include <filesystem>
#include <string>

namespace zero::detail {

// `owner` names the store's directory; `states` what it keeps, for the error.
inline NvmeTierOptions tier_options(const NvmeOptions& nvme, const std::filesystem::path& path,
                                    const std::string& owner, const std::string& states,
                                    const char* key) {
  require(!path.empty(), states + " on NVMe need a directory: set EngineOptions::" + key +
                             " (a DeepSpeed config's nvme_path)");
  NvmeTierOptions options;
  options.path = path;
  options.owner = owner;
  options.pin_memory = nvme.pin_memory;
  options.verify_checksums = nvme.verify_checksums;
  options.remove_stale = nvme.remove_stale;
  options.remove_stale_name = "EngineOptions::nvme.remove_stale";
  options.aio = nvme.aio;
  return options;
}

} // namespace zero::detail
