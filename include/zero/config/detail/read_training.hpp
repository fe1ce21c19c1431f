#pragma once
// Reading the "fp16", "bf16", "optimizer" and "scheduler" sections, with DeepSpeed's defaults and
// its quirks (the fp16 loss-scale defaults, Adam's adam_w_mode, case-insensitive optimizer names;
// 1-bit optimizers refused by name).

#include "zero/config/config.hpp"
#include "zero/config/detail/json_reader.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace zero::config::detail {

// DeepSpeed can keep master weights, gradients or optimizer states in 16 bits; zero always keeps
// fp32 master weights and moments, so such a config would train with other numbers than asked.
inline void refuse_16bit_master(ObjectReader& reader, std::string_view key) {
  if (reader.boolean(key, false))
    reader.context().unbuilt.push_back(
        {reader.path_of(key) + " = true",
         "zero keeps fp32 master weights, gradients' reduction results and optimizer states; "
         "16-bit ones are not built"});
}

inline Fp16Config read_fp16(ObjectReader& reader, int zero_stage) {
  Fp16Config fp16;
  fp16.enabled = reader.boolean("enabled", false);
  fp16.loss_scale = reader.number("loss_scale", 0.0, non_negative_number);
  constexpr std::array<std::string_view, 5> dynamic_keys{"initial_scale_power", "loss_scale_window",
                                                         "hysteresis", "consecutive_hysteresis",
                                                         "min_loss_scale"};
  const bool dynamic_keys_given =
      std::any_of(dynamic_keys.begin(), dynamic_keys.end(),
                  [&](std::string_view key) { return reader.has(key); });
  fp16.initial_scale_power =
      static_cast<int>(reader.integer("initial_scale_power", 16, IntegerRange{0, 127}));
  fp16.loss_scale_window = reader.integer("loss_scale_window", 1000, positive);
  fp16.hysteresis = static_cast<int>(reader.integer("hysteresis", 2, IntegerRange{1, 1 << 20}));
  fp16.consecutive_hysteresis = reader.boolean("consecutive_hysteresis", false);
  fp16.min_loss_scale = reader.number("min_loss_scale", 1.0, positive_number);
  refuse_16bit_master(reader, "fp16_master_weights_and_grads");
  if (fp16.enabled && !dynamic_keys_given) {
    // DeepSpeed's quirk, reproduced: without any of those keys its ZeRO optimizers construct the
    // loss scaler with the scaler's own defaults, and its stage-0 optimizer starts at 2^16.
    fp16.initial_scale_power = zero_stage == 0 ? 16 : 32;
    fp16.hysteresis = 1;
  }
  return fp16;
}

// Model parallelism (automatic tensor parallelism, sequence parallelism) splits what every rank
// computes; zero is data parallel only, so a config asking for more than one way is refused
// rather than trained as something else.
inline void read_model_parallelism(ObjectReader& top) {
  ParseContext& context = top.context();
  if (const auto ways = top.optional_integer("sequence_parallel_size", positive); ways && *ways > 1)
    context.unbuilt.push_back(
        {top.path_of("sequence_parallel_size") + " = " + std::to_string(*ways),
         "sequence parallelism is not built (zero is data parallel)"});
  top.object("tensor_parallel", [&](ObjectReader& r) {
    if (const auto ways = r.optional_integer("autotp_size", positive); ways && *ways > 1)
      context.unbuilt.push_back({r.path_of("autotp_size") + " = " + std::to_string(*ways),
                                 "tensor parallelism is not built (zero is data parallel)"});
  });
}

inline std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

inline void read_adam_params(ObjectReader& reader, OptimizerConfig& optimizer) {
  ParseContext& context = reader.context();
  if (const nlohmann::json* betas = reader.take("betas")) {
    const std::string path = reader.path_of("betas");
    if (!betas->is_array() || betas->size() != 2)
      context.fail_at(path, "expected two numbers [beta1, beta2], got " + describe(*betas));
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string beta_path = path + "[" + std::to_string(i) + "]";
      optimizer.betas[i] = as_number((*betas)[i], beta_path, context, non_negative_number);
      if (optimizer.betas[i] >= 1.0)
        context.fail_at(beta_path, "expected a number in [0, 1), got " + describe((*betas)[i]));
    }
  }
  optimizer.eps = reader.number("eps", optimizer.eps, non_negative_number);
  optimizer.adam_w_mode = reader.boolean("adam_w_mode", true);
  // Chooses between DeepSpeed's fused kernel and torch's loop: same arithmetic, nothing to map.
  reader.boolean("torch_adam", false);
  if (reader.boolean("amsgrad", false))
    context.unbuilt.push_back({reader.path_of("amsgrad") + " = true", "AMSGrad is not built"});
  optimizer.bias_correction = reader.boolean("bias_correction", true);
}

// FusedLamb's own parameters (betas, eps and bias_correction are read as Adam's).
inline void read_lamb_params(ObjectReader& reader, OptimizerConfig& optimizer) {
  optimizer.max_coeff = reader.number("max_coeff", optimizer.max_coeff, non_negative_number);
  optimizer.min_coeff = reader.number("min_coeff", optimizer.min_coeff, non_negative_number);
  if (optimizer.min_coeff > optimizer.max_coeff)
    reader.context().fail_at(reader.path_of("min_coeff"), "min_coeff must not exceed max_coeff (" +
                                                              std::to_string(optimizer.max_coeff) +
                                                              ")");
  if (reader.boolean("eps_inside_sqrt", false))
    reader.context().unbuilt.push_back({reader.path_of("eps_inside_sqrt") + " = true",
                                        "Lamb with eps inside the square root is not built"});
}

inline void read_sgd_params(ObjectReader& reader, OptimizerConfig& optimizer) {
  optimizer.momentum = reader.number("momentum", 0.0, non_negative_number);
  optimizer.dampening = reader.number("dampening", 0.0);
  optimizer.nesterov = reader.boolean("nesterov", false);
  if (optimizer.nesterov && (optimizer.momentum <= 0.0 || optimizer.dampening != 0.0))
    reader.context().fail_at(reader.path_of("nesterov"),
                             "Nesterov momentum needs momentum > 0 and dampening 0 "
                             "(as torch.optim.SGD)");
}

// zero's key for 8-bit moments (DeepSpeed has none): Adam's and AdamW's only, 8 or 32.
inline void read_moment_bits(ObjectReader& reader, OptimizerConfig& optimizer) {
  const std::int64_t bits = reader.integer("moment_bits", 32, positive);
  if (bits != 8 && bits != 32)
    reader.context().fail_at(reader.path_of("moment_bits"),
                             "expected 8 (block-wise 8-bit moments) or 32, got " +
                                 std::to_string(bits));
  if (bits == 8 && optimizer.type != OptimizerType::adam && optimizer.type != OptimizerType::adamw)
    reader.context().fail_at(reader.path_of("moment_bits"),
                             std::string("8-bit moments are built for Adam and AdamW, not ") +
                                 to_string(optimizer.type));
  optimizer.moment_bits = static_cast<int>(bits);
}

// zero's key for split master weights (DeepSpeed has none): 8 or 16 bits of residual beside the
// 16-bit compute weight, for the element-wise optimizers.
inline void read_master_residual_bits(ObjectReader& reader, OptimizerConfig& optimizer) {
  const std::int64_t bits = reader.integer("master_residual_bits", 0, positive);
  if (bits != 8 && bits != 16)
    reader.context().fail_at(reader.path_of("master_residual_bits"),
                             "expected 8 or 16 (bits of residual beside the 16-bit compute "
                             "weight), got " +
                                 std::to_string(bits));
  if (optimizer.type == OptimizerType::lamb)
    reader.context().fail_at(reader.path_of("master_residual_bits"),
                             "split master weights are built for Adam, AdamW and SGD, not Lamb");
  optimizer.master_residual_bits = static_cast<int>(bits);
}

// Unset when the type is one zero does not have yet (recorded as unbuilt).
inline std::optional<OptimizerConfig> read_optimizer(ObjectReader& reader) {
  ParseContext& context = reader.context();
  const std::string type = as_string(reader.take_required("type", "the optimizer section"),
                                     reader.path_of("type"), context);
  OptimizerConfig optimizer;
  const std::string name = lowercase(type);
  if (name == "adam")
    optimizer.type = OptimizerType::adam;
  else if (name == "adamw")
    optimizer.type = OptimizerType::adamw;
  else if (name == "sgd")
    optimizer.type = OptimizerType::sgd;
  else if (name == "lamb")
    optimizer.type = OptimizerType::lamb;
  else {
    const bool one_bit = name == "onebitadam" || name == "onebitlamb" || name == "zerooneadam";
    context.unbuilt.push_back(
        {reader.path_of("type") + " = \"" + type + "\"",
         one_bit ? "1-bit optimizers (compressed communication after a warm-up) are not built; "
                   "use Adam, AdamW or Lamb"
                 : "zero has Adam, AdamW, SGD and Lamb; other optimizers are not built yet"});
    reader.take("params"); // its keys belong to that optimizer, not to unknown-key warnings
    return std::nullopt;
  }
  reader.object("params", [&](ObjectReader& params) {
    // DeepSpeed's engine refuses this key for every optimizer, in favour of gradient_clipping.
    if (params.has("max_grad_norm"))
      context.fail_at(params.path_of("max_grad_norm"),
                      "DeepSpeed does not take it as an optimizer parameter; use "
                      "\"gradient_clipping\" at the top level");
    optimizer.lr = params.number("lr", optimizer.lr, non_negative_number);
    optimizer.weight_decay = params.number("weight_decay", 0.0, non_negative_number);
    if (optimizer.type == OptimizerType::sgd)
      read_sgd_params(params, optimizer);
    else
      read_adam_params(params, optimizer);
    if (optimizer.type == OptimizerType::lamb) read_lamb_params(params, optimizer);
    if (params.has("moment_bits")) read_moment_bits(params, optimizer);
    if (params.has("master_residual_bits")) read_master_residual_bits(params, optimizer);
  });
  return optimizer;
}

inline WarmupType read_warmup_type(ObjectReader& reader) {
  const std::string type = reader.optional_string("warmup_type").value_or("log");
  if (type == "log") return WarmupType::log;
  if (type == "linear") return WarmupType::linear;
  reader.context().fail_at(reader.path_of("warmup_type"),
                           "expected \"log\" or \"linear\", got \"" + type + "\"");
}

// DeepSpeed checks isinstance(warmup_num_steps, int), so 1e3 is refused there and here.
inline std::int64_t read_warmup_steps(ObjectReader& reader) {
  return reader.integer("warmup_num_steps", 1000, positive, IntegerSyntax::literal);
}

inline void note_short_schedule(ObjectReader& reader, std::int64_t total, std::int64_t warmup) {
  if (total < warmup)
    reader.context().notes.push_back(reader.path_of("total_num_steps") + " " +
                                     std::to_string(total) + " is less than warmup_num_steps " +
                                     std::to_string(warmup));
}

inline LrSchedule read_schedule(const std::string& type, ObjectReader& params) {
  const std::string needed_by = "scheduler type " + type;
  auto total_steps = [&] {
    return as_integer(params.take_required("total_num_steps", needed_by),
                      params.path_of("total_num_steps"), params.context(), non_negative);
  };
  if (type == "WarmupLR") {
    return WarmupLR{params.number("warmup_min_lr", 0.0, non_negative_number),
                    params.optional_number("warmup_max_lr", non_negative_number),
                    read_warmup_steps(params), read_warmup_type(params)};
  }
  if (type == "WarmupDecayLR") {
    WarmupDecayLR s{total_steps(), params.number("warmup_min_lr", 0.0, non_negative_number),
                    params.number("warmup_max_lr", 0.001, non_negative_number),
                    read_warmup_steps(params), read_warmup_type(params)};
    note_short_schedule(params, s.total_num_steps, s.warmup_num_steps);
    return s;
  }
  if (type == "WarmupCosineLR") {
    WarmupCosineLR s{total_steps(),
                     params.number("warmup_min_ratio", 0.0, NumberRange{0.0, false, 1.0}),
                     read_warmup_steps(params),
                     params.number("cos_min_ratio", 0.0001, NumberRange{0.0, false, 1.0}),
                     read_warmup_type(params)};
    note_short_schedule(params, s.total_num_steps, s.warmup_num_steps);
    return s;
  }
  auto required_lr = [&](const char* key) {
    return as_number(params.take_required(key, needed_by), params.path_of(key), params.context(),
                     non_negative_number);
  };
  OneCycle s;
  s.cycle_min_lr = required_lr("cycle_min_lr");
  s.cycle_max_lr = required_lr("cycle_max_lr");
  s.decay_lr_rate = params.number("decay_lr_rate", 0.0);
  s.cycle_first_step_size = params.number("cycle_first_step_size", 2000, positive_number);
  s.cycle_second_step_size = params.optional_number("cycle_second_step_size", positive_number);
  s.cycle_first_stair_count = params.integer("cycle_first_stair_count", 0, non_negative);
  s.cycle_second_stair_count = params.optional_integer("cycle_second_stair_count", non_negative);
  s.decay_step_size = params.integer("decay_step_size", 0, non_negative);
  s.cycle_momentum = params.boolean("cycle_momentum", true);
  s.cycle_min_mom = params.number("cycle_min_mom", 0.8, NumberRange{0.0, false, 1.0});
  s.cycle_max_mom = params.number("cycle_max_mom", 0.9, NumberRange{0.0, false, 1.0});
  s.decay_mom_rate = params.number("decay_mom_rate", 0.0);
  return s;
}

// Unset when the type is one zero does not have yet (recorded as unbuilt).
inline std::optional<SchedulerConfig>
read_scheduler(ObjectReader& reader, const std::optional<OptimizerConfig>& optimizer) {
  ParseContext& context = reader.context();
  const std::string type = as_string(reader.take_required("type", "the scheduler section"),
                                     reader.path_of("type"), context);
  if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR" &&
      type != "OneCycle") {
    context.unbuilt.push_back({reader.path_of("type") + " = \"" + type + "\"",
                               "zero has WarmupLR, WarmupDecayLR, WarmupCosineLR and OneCycle; "
                               "other schedules are not built yet"});
    reader.take("params");
    return std::nullopt;
  }
  std::optional<SchedulerConfig> scheduler;
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json* params_json = reader.take("params");
  ObjectReader params(params_json ? *params_json : empty, reader.path_of("params"), context);
  scheduler = SchedulerConfig{read_schedule(type, params),
                              params.integer("last_batch_iteration", -1, IntegerRange{-1})};
  params.finish();
  auto* one_cycle = std::get_if<OneCycle>(&scheduler->schedule);
  if (one_cycle && one_cycle->cycle_momentum && optimizer &&
      optimizer->type == OptimizerType::sgd) {
    one_cycle->cycle_momentum = false; // as DeepSpeed: SGD has no betas to cycle
    context.notes.push_back(reader.path_of("params.cycle_momentum") +
                            " is off: SGD has no betas to cycle");
  }
  return scheduler;
}

} // namespace zero::config::detail
