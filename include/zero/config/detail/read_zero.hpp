#pragma once
// Reading the "zero_optimization" and "activation_checkpointing" sections, with DeepSpeed's
// spellings (stage3_* and their short aliases, the deprecated cpu_offload switches).

#include "zero/config/activation_checkpointing.hpp"
#include "zero/config/detail/json_reader.hpp"
#include "zero/config/zero_optimization.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zero::config::detail {

inline OffloadDevice read_offload_device(ObjectReader& reader) {
  const std::optional<std::string> name = reader.optional_string("device");
  if (!name || *name == "none") return OffloadDevice::none;
  if (*name == "cpu") return OffloadDevice::cpu;
  if (*name == "nvme") return OffloadDevice::nvme;
  reader.context().fail_at(reader.path_of("device"),
                           "expected \"none\", \"cpu\" or \"nvme\", got \"" + *name + "\"");
}

inline void read_offload(ObjectReader& reader, OffloadOptimizerConfig& offload) {
  offload.device = read_offload_device(reader);
  offload.nvme_path = reader.optional_string("nvme_path").value_or("");
  offload.pin_memory = reader.boolean("pin_memory", offload.pin_memory);
  offload.buffer_count = reader.integer("buffer_count", offload.buffer_count, non_negative);
  offload.pipeline_read = reader.boolean("pipeline_read", offload.pipeline_read);
  offload.pipeline_write = reader.boolean("pipeline_write", offload.pipeline_write);
  offload.fast_init = reader.boolean("fast_init", offload.fast_init);
  offload.ratio = reader.number("ratio", offload.ratio, NumberRange{0.0, false, 1.0});
  offload.super_offload = reader.boolean("super_offload", offload.super_offload);
}

inline void read_offload(ObjectReader& reader, OffloadParamConfig& offload) {
  offload.device = read_offload_device(reader);
  offload.nvme_path = reader.optional_string("nvme_path").value_or("");
  offload.pin_memory = reader.boolean("pin_memory", offload.pin_memory);
  offload.buffer_count = reader.integer("buffer_count", offload.buffer_count, non_negative);
  offload.buffer_size = reader.integer("buffer_size", offload.buffer_size, non_negative);
  offload.max_in_cpu = reader.integer("max_in_cpu", offload.max_in_cpu, non_negative);
}

// DeepSpeed accepts both `stage3_prefetch_bucket_size` and `prefetch_bucket_size` (and so on).
inline std::int64_t read_stage3_size(ObjectReader& reader, std::string_view short_name,
                                     std::int64_t fallback) {
  const std::string long_name = "stage3_" + std::string(short_name);
  if (reader.has(long_name) && reader.has(short_name))
    reader.context().fail_at(reader.path_of(long_name),
                             "given twice, also as " + std::string(short_name) + "; keep one");
  const std::optional<std::int64_t> value = reader.optional_integer(long_name, non_negative);
  return value ? *value : reader.integer(short_name, fallback, non_negative);
}

// The same, for a size whose absence means something of its own.
inline std::optional<std::int64_t> read_optional_stage3_size(ObjectReader& reader,
                                                             std::string_view short_name) {
  if (!reader.has("stage3_" + std::string(short_name)) && !reader.has(short_name))
    return std::nullopt;
  return read_stage3_size(reader, short_name, 0);
}

// The deprecated switches map onto the offload sections as DeepSpeed maps them.
inline void read_deprecated_offload(ObjectReader& reader, ZeroOptimizationConfig& zero_opt) {
  ParseContext& context = reader.context();
  if (reader.boolean("cpu_offload", false)) {
    zero_opt.offload_optimizer.device = OffloadDevice::cpu;
    context.notes.push_back(reader.path_of("cpu_offload") +
                            " is deprecated; read as offload_optimizer.device = \"cpu\"");
  }
  if (reader.boolean("cpu_offload_param", false)) {
    zero_opt.offload_param.device = OffloadDevice::cpu;
    context.notes.push_back(reader.path_of("cpu_offload_param") +
                            " is deprecated; read as offload_param.device = \"cpu\"");
  }
  if (reader.boolean("cpu_offload_use_pin_memory", false)) {
    zero_opt.offload_optimizer.pin_memory = zero_opt.offload_param.pin_memory = true;
    context.notes.push_back(reader.path_of("cpu_offload_use_pin_memory") +
                            " is deprecated; read as pin_memory of both offload sections");
  }
}

inline void check_offload(const ObjectReader& reader, const ZeroOptimizationConfig& zero_opt) {
  const ParseContext& context = reader.context();
  const std::string stage = std::to_string(zero_opt.stage);
  const auto& optimizer = zero_opt.offload_optimizer;
  const auto& param = zero_opt.offload_param;
  if (optimizer.device != OffloadDevice::none && zero_opt.stage == 0)
    context.fail_at(reader.path_of("offload_optimizer"), "needs ZeRO stage 1, 2 or 3, got stage 0");
  if (param.device != OffloadDevice::none && zero_opt.stage != 3)
    context.fail_at(reader.path_of("offload_param"), "needs ZeRO stage 3, got stage " + stage);
  if (optimizer.ratio < 1.0 && zero_opt.stage != 3)
    context.fail_at(reader.path_of("offload_optimizer.ratio"),
                    "partial offload needs ZeRO stage 3, got stage " + stage);
  if (optimizer.super_offload && optimizer.device != OffloadDevice::cpu)
    context.fail_at(reader.path_of("offload_optimizer.super_offload"),
                    "speculates the CPU's update in host memory: needs device \"cpu\"");
  if (optimizer.device == OffloadDevice::nvme && optimizer.nvme_path.empty())
    context.fail_at(reader.path_of("offload_optimizer.nvme_path"), "required with device \"nvme\"");
  if (param.device == OffloadDevice::nvme && param.nvme_path.empty())
    context.fail_at(reader.path_of("offload_param.nvme_path"), "required with device \"nvme\"");
}

inline ZeroOptimizationConfig read_zero_optimization(ObjectReader& reader) {
  ZeroOptimizationConfig zero_opt;
  zero_opt.stage = static_cast<int>(reader.integer("stage", 0, IntegerRange{0, 3}));
  zero_opt.contiguous_gradients = reader.boolean("contiguous_gradients", true);
  if (const nlohmann::json* value = reader.take("overlap_comm"))
    zero_opt.overlap_comm = as_bool(*value, reader.path_of("overlap_comm"), reader.context());
  zero_opt.reduce_scatter = reader.boolean("reduce_scatter", true);
  zero_opt.reduce_bucket_size =
      reader.integer("reduce_bucket_size", zero_opt.reduce_bucket_size, non_negative);
  zero_opt.allgather_partitions = reader.boolean("allgather_partitions", true);
  zero_opt.allgather_bucket_size =
      reader.integer("allgather_bucket_size", zero_opt.allgather_bucket_size, non_negative);
  zero_opt.stage3_prefetch_bucket_size =
      read_stage3_size(reader, "prefetch_bucket_size", zero_opt.stage3_prefetch_bucket_size);
  zero_opt.stage3_param_persistence_threshold = read_stage3_size(
      reader, "param_persistence_threshold", zero_opt.stage3_param_persistence_threshold);
  zero_opt.stage3_max_live_parameters =
      read_stage3_size(reader, "max_live_parameters", zero_opt.stage3_max_live_parameters);
  zero_opt.stage3_max_reuse_distance = read_optional_stage3_size(reader, "max_reuse_distance");
  zero_opt.sub_group_size = reader.integer("sub_group_size", zero_opt.sub_group_size, positive);
  reader.object("offload_optimizer",
                [&](ObjectReader& r) { read_offload(r, zero_opt.offload_optimizer); });
  reader.object("offload_param", [&](ObjectReader& r) { read_offload(r, zero_opt.offload_param); });
  read_deprecated_offload(reader, zero_opt);
  check_offload(reader, zero_opt);
  zero_opt.zero_quantized_weights = reader.boolean("zero_quantized_weights", false);
  zero_opt.zero_hpz_partition_size =
      reader.integer("zero_hpz_partition_size", 1, IntegerRange{1, 1 << 20});
  zero_opt.zero_quantized_gradients = reader.boolean("zero_quantized_gradients", false);
  if (zero_opt.zero_quantized_weights && zero_opt.stage != 3)
    reader.context().fail_at(reader.path_of("zero_quantized_weights"),
                             "quantizes stage 3's weight gathers, so it needs ZeRO stage 3, got "
                             "stage " +
                                 std::to_string(zero_opt.stage));
  if (zero_opt.zero_quantized_gradients && zero_opt.stage == 0)
    reader.context().fail_at(reader.path_of("zero_quantized_gradients"),
                             "quantizes the gradients' reduce-scatter, so it needs ZeRO stage 1, 2 "
                             "or 3 (stage 0 all-reduces them)");
  if (zero_opt.zero_hpz_partition_size > 1 && zero_opt.stage != 3)
    reader.context().fail_at(reader.path_of("zero_hpz_partition_size"),
                             "cuts stage 3's weights a second time, so it needs ZeRO stage 3, got "
                             "stage " +
                                 std::to_string(zero_opt.stage));
  return zero_opt;
}

inline ActivationCheckpointingConfig read_activation_checkpointing(ObjectReader& reader) {
  ActivationCheckpointingConfig checkpointing;
  checkpointing.given = true;
  checkpointing.partition_activations = reader.boolean("partition_activations", false);
  checkpointing.cpu_checkpointing = reader.boolean("cpu_checkpointing", false);
  checkpointing.contiguous_memory_optimization =
      reader.boolean("contiguous_memory_optimization", false);
  checkpointing.number_checkpoints = reader.optional_integer("number_checkpoints", positive);
  checkpointing.synchronize_checkpoint_boundary =
      reader.boolean("synchronize_checkpoint_boundary", false);
  checkpointing.profile = reader.boolean("profile", false);
  // DeepSpeed also asks for partition_activations with the arena; zero's arena holds whole inputs
  // or slices alike, so it stands on its own.
  if (checkpointing.contiguous_memory_optimization && !checkpointing.number_checkpoints)
    reader.context().fail_at(reader.path_of("number_checkpoints"),
                             "required with contiguous_memory_optimization = true");
  return checkpointing;
}

} // namespace zero::config::detail
