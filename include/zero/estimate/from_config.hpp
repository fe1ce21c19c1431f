#pragma once
// The estimator's inputs that a DeepSpeed config fixes: the ZeRO stage, the offload targets, and
// the bytes per parameter that its precision and optimizer imply.

#include "zero/config/config.hpp"
#include "zero/estimate/memory.hpp"

#include <cstdint>

namespace zero::estimate {

inline Tier tier_of(config::OffloadDevice device) noexcept {
  switch (device) {
  case config::OffloadDevice::none:
    return Tier::device;
  case config::OffloadDevice::cpu:
    return Tier::cpu;
  case config::OffloadDevice::nvme:
    return Tier::nvme;
  }
  return Tier::device;
}

// 16-bit training keeps an fp32 master copy in the optimizer states; fp32 training has none.
// Adam keeps two fp32 moments, SGD one with momentum and none without. No optimizer section
// means the program brings its own; Adam is assumed, as in the paper. A split master
// ("master_residual_bits": 8 or 16) keeps only its residual, 1 or 2 bytes. Adam's moments in 8 bits
// ("moment_bits": 8) take a byte each and an fp32 scale per block of 2048 (layers kept in fp32
// and the padding to whole blocks are left out: they depend on the model's layers).
inline BytesPerParameter bytes_per_parameter(const config::Config& config) {
  const bool sixteen_bit = config.fp16.enabled || config.bf16.enabled;
  const bool sgd = config.optimizer && config.optimizer->type == config::OptimizerType::sgd;
  const bool eight_bit = config.optimizer && config.optimizer->moment_bits == 8;
  const double adam_moments = eight_bit ? eight_bit_adam_moment_bytes : 8.0;
  const double moments = sgd ? (config.optimizer->momentum > 0 ? 4.0 : 0.0) : adam_moments;
  const double model_bytes = sixteen_bit ? 2.0 : 4.0;
  const int residual_bits = config.optimizer ? config.optimizer->master_residual_bits : 0;
  const double master = residual_bits == 0 ? 4.0 : residual_bits / 8.0; // split: the residual
  return {model_bytes, model_bytes, (sixteen_bit ? master : 0.0) + moments};
}

inline ModelStateQuery query_from_config(const config::Config& config, double parameters,
                                         std::int64_t data_parallel) {
  const auto& zero_opt = config.zero_optimization;
  return {parameters,
          data_parallel,
          zero_opt.stage,
          bytes_per_parameter(config),
          tier_of(zero_opt.offload_optimizer.device),
          tier_of(zero_opt.offload_param.device),
          zero_opt.offload_optimizer.device == config::OffloadDevice::none
              ? 1.0
              : zero_opt.offload_optimizer.ratio};
}

} // namespace zero::estimate
