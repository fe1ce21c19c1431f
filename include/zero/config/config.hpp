#pragma once
// The training options of a DeepSpeed ds_config.json, the subset zero runs, as plain structs with
// DeepSpeed's key names and defaults. Build one in code with designated initializers, or read one
// with config/json.hpp; check it against the world size with config/batch.hpp and against what
// is built with config/unbuilt.hpp.

#include "zero/config/activation_checkpointing.hpp"
#include "zero/config/aio.hpp"
#include "zero/config/optimizer.hpp"
#include "zero/config/precision.hpp"
#include "zero/config/zero_optimization.hpp"
#include "zero/schedule/lr_scheduler.hpp"

#include <cstdint>
#include <optional>

namespace zero::config {

struct SchedulerConfig {
  LrSchedule schedule{};
  std::int64_t last_batch_iteration = -1; // DeepSpeed's resume argument; -1 starts the schedule
  friend bool operator==(const SchedulerConfig&, const SchedulerConfig&) = default;
};

struct Config {
  // Any two of the three batch sizes, or one of the first two, determine the rest once the world
  // size is known: see resolve_batch_sizes().
  std::optional<std::int64_t> train_batch_size = std::nullopt;
  std::optional<std::int64_t> train_micro_batch_size_per_gpu = std::nullopt;
  std::optional<std::int64_t> gradient_accumulation_steps = std::nullopt;
  double gradient_clipping = 0.0; // maximum global L2 norm of the gradients; 0: no clipping
  Fp16Config fp16{};
  Bf16Config bf16{};
  std::optional<OptimizerConfig> optimizer =
      std::nullopt; // unset: the program brings its own optimizer
  std::optional<SchedulerConfig> scheduler = std::nullopt; // unset: constant learning rate
  ZeroOptimizationConfig zero_optimization{};
  ActivationCheckpointingConfig activation_checkpointing{};
  // How the NVMe tier talks to the disk (DeepSpeed's top-level "aio" section).
  AioConfig aio{};
  std::optional<std::int64_t> steps_per_print = std::nullopt; // unset: no periodic report
  bool wall_clock_breakdown = false;
  // DeepSpeed refuses a client optimizer under ZeRO without this; kept for the engine to honour.
  bool zero_allow_untested_optimizer = false;

  friend bool operator==(const Config&, const Config&) = default;
};

} // namespace zero::config

namespace zero {
using Config = config::Config;
} // namespace zero
