#pragma once
// NvmeOptions: where and how the engine keeps model states on the NVMe tier (ZeRO-Infinity on the
// host), DeepSpeed's offload_optimizer / offload_param sections, zero_optimization.sub_group_size
// and the aio section under their own names. from_config() honours each key or refuses it by name
// with the reason; what the host engine does with each is in docs/nvme-tier.md.

#include "zero/config/config.hpp"
#include "zero/core/error.hpp"
#include "zero/nvme/aio_options.hpp"

#include <cstddef>
#include <filesystem>
#include <string>

namespace zero {

// fp32 master weights and optimizer moments on NVMe (offload_optimizer.device = "nvme").
struct OptimizerOffload {
  std::filesystem::path nvme_path;
  // Sub-groups held in bounce buffers at once: 3 lets the step read one, update one and write one.
  std::size_t buffer_count = 4;
  // Elements of this rank's shard the step reads, updates and writes back at a time.
  std::size_t sub_group_size = 1'000'000'000;
  bool pipeline_read = false;  // read sub-group k+1 while k is updated
  bool pipeline_write = false; // write sub-group k back while k+1 is updated
};

// Stage 3's parameter shards on NVMe (offload_param.device = "nvme").
struct ParameterOffload {
  std::filesystem::path nvme_path;
  std::size_t buffer_count = 5;           // layer blocks read ahead or in use at once
  std::size_t buffer_size = 100'000'000;  // elements a buffer holds: the largest block must fit
  std::size_t max_in_cpu = 1'000'000'000; // parameter elements that stay in memory (first layers)
};

struct NvmeOptions {
  OptimizerOffload optimizer;
  ParameterOffload parameters;
  AioOptions aio;
  bool pin_memory = false;      // lock the bounce buffers in RAM
  bool verify_checksums = true; // every 4096-byte unit checked when read back
  bool remove_stale = false;    // delete swap files a crashed run left, instead of refusing them

  void validate() const {
    aio.validate();
    require(optimizer.buffer_count >= 1,
            "offload_optimizer.buffer_count must be at least 1 (3 for a full pipeline)");
    require(optimizer.sub_group_size >= 1, "zero_optimization.sub_group_size must be at least 1");
    require(parameters.buffer_count >= 1, "offload_param.buffer_count must be at least 1");
    require(parameters.buffer_size >= 1, "offload_param.buffer_size must be at least 1");
  }

  // The NVMe keys of a DeepSpeed config. Keys that ask for what the host engine cannot do are
  // refused with the reason; the others are honoured as DeepSpeed means them.
  static NvmeOptions from_config(const config::Config& c) {
    const auto& z = c.zero_optimization;
    NvmeOptions o;
    o.optimizer.nvme_path = z.offload_optimizer.nvme_path;
    o.optimizer.buffer_count = static_cast<std::size_t>(z.offload_optimizer.buffer_count);
    o.optimizer.sub_group_size = static_cast<std::size_t>(z.sub_group_size);
    o.optimizer.pipeline_read = z.offload_optimizer.pipeline_read;
    o.optimizer.pipeline_write = z.offload_optimizer.pipeline_write;
    o.parameters.nvme_path = z.offload_param.nvme_path;
    o.parameters.buffer_count = static_cast<std::size_t>(z.offload_param.buffer_count);
    o.parameters.buffer_size = static_cast<std::size_t>(z.offload_param.buffer_size);
    o.parameters.max_in_cpu = static_cast<std::size_t>(z.offload_param.max_in_cpu);
    o.pin_memory = z.offload_optimizer.pin_memory || z.offload_param.pin_memory;
    o.aio = AioOptions::from_config(c);
    o.validate();
    return o;
  }
};

} // namespace zero
