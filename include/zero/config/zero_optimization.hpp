#pragma once
// The "zero_optimization" section of a DeepSpeed config: the ZeRO stage, the communication
// buckets, the stage-3 prefetch and release knobs, and the offload targets, with DeepSpeed's
// defaults. Sizes are counts of elements, not bytes, as in DeepSpeed.

#include <cstdint>
#include <optional>
#include <string>

namespace zero::config {

// Where offloaded state lives: "nvme" is the NVMe tier (ZeRO-Infinity, offload/); "cpu" is host
// memory, where the host engine keeps model states anyway. The engine's placement type must
// agree with what a config asks for.
enum class OffloadDevice { none, cpu, nvme };

constexpr const char* to_string(OffloadDevice device) noexcept {
  switch (device) {
  case OffloadDevice::none:
    return "none";
  case OffloadDevice::cpu:
    return "cpu";
  case OffloadDevice::nvme:
    return "nvme";
  }
  return "?";
}

// ZeRO-Offload / ZeRO-Infinity for optimizer states (stages 1-3).
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path{}; // required for nvme
  bool pin_memory = false;
  std::int64_t buffer_count = 4;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;     // accepted; the NVMe store initialises its states directly either way
  double ratio = 1.0;         // share of the optimizer states offloaded; below 1 only with stage 3
  bool super_offload = false; // SuperOffload: its speculative update (device "cpu" only)
  friend bool operator==(const OffloadOptimizerConfig&, const OffloadOptimizerConfig&) = default;
};

// ZeRO-Infinity for parameters (stage 3 only).
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path{}; // required for nvme
  bool pin_memory = false;
  std::int64_t buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;
  std::int64_t max_in_cpu = 1'000'000'000;
  friend bool operator==(const OffloadParamConfig&, const OffloadParamConfig&) = default;
};

struct ZeroOptimizationConfig {
  int stage = 0; // 0: plain data parallelism; 1: optimizer states; 2: + gradients; 3: + parameters
  bool contiguous_gradients = true;
  // Unset: zero overlaps at every stage (DeepSpeed's default is on for stage 3 only; overlapping
  // changes no result on the host, only when the reduction's time is paid).
  std::optional<bool> overlap_comm = std::nullopt;
  bool reduce_scatter = true;
  std::int64_t reduce_bucket_size = 500'000'000;
  // false asks for parameter broadcasts instead of an all-gather after the step (not built).
  bool allgather_partitions = true;
  std::int64_t allgather_bucket_size = 500'000'000;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t stage3_param_persistence_threshold = 100'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  // Unset: a released layer stays gathered only when it is acquired next. DeepSpeed's default,
  // 1e9, keeps every layer reused within 1e9 elements (most of a small model): give it to get that.
  std::optional<std::int64_t> stage3_max_reuse_distance = std::nullopt;
  // Elements per optimizer sub-group: the NVMe tier swaps and updates one sub-group at a time.
  std::int64_t sub_group_size = 1'000'000'000;
  OffloadOptimizerConfig offload_optimizer{};
  OffloadParamConfig offload_param{};
  // ZeRO++ (stage 3): int8 weight gathers (qwZ); a secondary shard of the weights within groups of
  // this many ranks (hpZ, 1: none); quantized gradient reduce-scatter (qgZ, stages 1-3).
  bool zero_quantized_weights = false;
  std::int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_gradients = false;

  friend bool operator==(const ZeroOptimizationConfig&, const ZeroOptimizationConfig&) = default;
};

} // namespace zero::config
