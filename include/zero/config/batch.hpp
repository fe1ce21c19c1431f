#pragma once
// DeepSpeed's batch-size rule: train_batch_size = train_micro_batch_size_per_gpu *
// gradient_accumulation_steps * world size. Missing sizes are derived the way DeepSpeed derives
// them (integer division, in its order), then the rule is checked; a violation is an error that
// shows the arithmetic.

#include "zero/config/config.hpp"
#include "zero/core/error.hpp"

#include <cstdint>
#include <string>

namespace zero::config {

struct BatchSizes {
  std::int64_t train_batch_size;
  std::int64_t train_micro_batch_size_per_gpu;
  std::int64_t gradient_accumulation_steps;
};

// `source` (the config file's name, say) starts every message when given.
inline BatchSizes resolve_batch_sizes(const Config& config, std::int64_t world_size,
                                      const std::string& source = {}) {
  auto named = [&](const std::string& message) {
    return source.empty() ? message : source + ": " + message;
  };
  require(world_size >= 1,
          named("batch sizes: world size must be at least 1, got " + std::to_string(world_size)));
  const auto& train = config.train_batch_size;
  const auto& micro = config.train_micro_batch_size_per_gpu;
  const auto& accumulation = config.gradient_accumulation_steps;
  const std::string world = std::to_string(world_size);
  auto str = [](std::int64_t v) { return std::to_string(v); };

  BatchSizes sizes{};
  std::string derivation; // how a missing size was obtained, shown if the rule then fails
  if (train && micro && accumulation) {
    sizes = {*train, *micro, *accumulation};
  } else if (train && micro) {
    require(*micro > 0, named("train_micro_batch_size_per_gpu must be positive"));
    sizes = {*train, *micro, *train / *micro / world_size};
    derivation = "gradient_accumulation_steps = train_batch_size // "
                 "train_micro_batch_size_per_gpu // world size = " +
                 str(*train) + " // " + str(*micro) + " // " + world + " = " +
                 str(sizes.gradient_accumulation_steps);
  } else if (train && accumulation) {
    require(*accumulation > 0, named("gradient_accumulation_steps must be positive"));
    sizes = {*train, *train / world_size / *accumulation, *accumulation};
    derivation = "train_micro_batch_size_per_gpu = train_batch_size // world size // "
                 "gradient_accumulation_steps = " +
                 str(*train) + " // " + world + " // " + str(*accumulation) + " = " +
                 str(sizes.train_micro_batch_size_per_gpu);
  } else if (micro && accumulation) {
    sizes = {*micro * *accumulation * world_size, *micro, *accumulation};
  } else if (train) {
    sizes = {*train, *train / world_size, 1};
    derivation =
        "train_micro_batch_size_per_gpu = train_batch_size // world size = " + str(*train) +
        " // " + world + " = " + str(sizes.train_micro_batch_size_per_gpu) +
        " (gradient_accumulation_steps = 1)";
  } else if (micro) {
    sizes = {*micro * world_size, *micro, 1};
  } else {
    fail(ErrorKind::invalid_argument,
         named("batch sizes: give train_batch_size or train_micro_batch_size_per_gpu (or both)"));
  }

  auto positive = [&](const char* name, std::int64_t value) {
    if (value <= 0)
      fail(ErrorKind::invalid_argument,
           named(std::string("batch sizes: ") + name + " must be positive, got " + str(value) +
                 (derivation.empty() ? "" : " (" + derivation + ")")));
  };
  positive("train_batch_size", sizes.train_batch_size);
  positive("train_micro_batch_size_per_gpu", sizes.train_micro_batch_size_per_gpu);
  positive("gradient_accumulation_steps", sizes.gradient_accumulation_steps);

  const std::int64_t product =
      sizes.train_micro_batch_size_per_gpu * sizes.gradient_accumulation_steps * world_size;
  if (product != sizes.train_batch_size)
    fail(ErrorKind::invalid_argument,
         named("batch sizes do not fit world size " + world + ": train_batch_size " +
               str(sizes.train_batch_size) + " != train_micro_batch_size_per_gpu " +
               str(sizes.train_micro_batch_size_per_gpu) + " * gradient_accumulation_steps " +
               str(sizes.gradient_accumulation_steps) + " * world size " + world + " = " +
               str(product) + (derivation.empty() ? "" : " (" + derivation + ")")));
  return sizes;
}

} // namespace zero::config
