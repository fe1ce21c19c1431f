// Reading ds_config.json text: values, DeepSpeed's number rules and quirks, and errors that name
// the JSON path, the line and column, the unknown keys and the unbuilt features.

#include "config_test_support.hpp"

#include <zero/engine/options.hpp>

#include <gtest/gtest.h>

#include <variant>

namespace {

using zero::ErrorKind;
using zero::testing::expect_error;
using zero::testing::expect_invalid;
using zero::testing::parse;
namespace config = zero::config;

TEST(ConfigJson, ReadsEveryListedOption) {
  const auto parsed = parse(R"({
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0, "steps_per_print": 100, "wall_clock_breakdown": true,
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 0.5},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                              "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 3e-4, "warmup_num_steps": 10}},
    "zero_optimization": {"stage": 3, "contiguous_gradients": false, "overlap_comm": false,
      "reduce_scatter": false, "reduce_bucket_size": 5e7, "allgather_bucket_size": 2e8,
      "stage3_prefetch_bucket_size": 1e6, "stage3_param_persistence_threshold": 1e4,
      "stage3_max_live_parameters": 3e8, "stage3_max_reuse_distance": 2e8},
    "activation_checkpointing": {"number_checkpoints": 8, "synchronize_checkpoint_boundary": true,
                                 "profile": true}
  })");
  EXPECT_TRUE(parsed.warnings.empty());
  const config::Config& c = parsed.config;
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 100);
  EXPECT_TRUE(c.wall_clock_breakdown);
  EXPECT_TRUE(c.fp16.enabled && c.fp16.dynamic_loss_scale());
  EXPECT_EQ(c.fp16.initial_dynamic_scale(), 4096.0);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 0.5);
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->type, config::OptimizerType::adamw);
  EXPECT_EQ(c.optimizer->lr, 3e-4);
  EXPECT_EQ(c.optimizer->betas[0], 0.8);
  EXPECT_EQ(c.optimizer->betas[1], 0.95);
  EXPECT_EQ(c.optimizer->eps, 1e-6);
  EXPECT_EQ(c.optimizer->weight_decay, 0.1);
  ASSERT_TRUE(c.scheduler);
  const auto& warmup = std::get<zero::WarmupLR>(c.scheduler->schedule);
  EXPECT_EQ(warmup.warmup_max_lr, 3e-4);
  EXPECT_EQ(warmup.warmup_num_steps, 10);
  const auto& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 3);
  EXPECT_FALSE(z.contiguous_gradients);
  EXPECT_EQ(z.overlap_comm, false);
  EXPECT_FALSE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 50'000'000);
  EXPECT_EQ(z.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 1'000'000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 10'000);
  EXPECT_EQ(z.stage3_max_live_parameters, 300'000'000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 200'000'000);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 8);
  EXPECT_TRUE(c.activation_checkpointing.synchronize_checkpoint_boundary);
  EXPECT_TRUE(c.activation_checkpointing.profile);
}

TEST(ConfigJson, ErrorsNameThePathAndTheValue) {
  expect_invalid(R"({"zero_optimization": {"stage": 4}})",
                 {"ds_config.json: zero_optimization.stage: expected 0..3, got 4"});
  expect_invalid(R"({"fp16": {"enabled": "yes"}})",
                 {"fp16.enabled: expected true or false, got \"yes\""});
  expect_invalid(R"({"train_batch_size": 0})",
                 {"train_batch_size: expected a positive integer, got 0"});
  expect_invalid(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.5]}}})",
                 {"optimizer.params.betas[1]: expected a number in [0, 1), got 1.5"});
  expect_invalid(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})",
                 {"zero_optimization.offload_param.device: expected \"none\", \"cpu\" or "
                  "\"nvme\", got \"gpu\""});
  expect_invalid(
      R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})",
      {"scheduler.params.total_num_steps: missing; scheduler type WarmupDecayLR needs it"});
  expect_invalid(R"({"fp16": [1]})", {"fp16: expected an object, got [1]"});
  // The Hugging Face Trainer fills in "auto"; without a value from the program it is named.
  expect_invalid(R"({"train_micro_batch_size_per_gpu": "auto"})",
                 {"\"auto\" needs a value from the program", "Hugging Face",
                  "for 1 key:\n  train_micro_batch_size_per_gpu"});
}

TEST(ConfigJson, NumbersFollowDeepSpeed) {
  // Whole numbers in exponent form are integers where DeepSpeed's pydantic ints take them.
  const auto parsed = parse(R"({"zero_optimization": {"reduce_bucket_size": 5e8,
                                 "allgather_bucket_size": 2.0E+8}, "steps_per_print": 9999999999})");
  EXPECT_EQ(parsed.config.zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(parsed.config.zero_optimization.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(parsed.config.steps_per_print, 9'999'999'999);
  expect_invalid(R"({"zero_optimization": {"reduce_bucket_size": 5.5}})",
                 {"zero_optimization.reduce_bucket_size", "got 5.5, which is not a whole number"});
  expect_invalid(R"({"zero_optimization": {"reduce_bucket_size": -1}})",
                 {"expected a non-negative integer, got -1"});
  // DeepSpeed's warm-up schedules check isinstance(warmup_num_steps, int).
  expect_invalid(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1e3}}})",
                 {"scheduler.params.warmup_num_steps", "integer literal"});
}

TEST(ConfigJson, MalformedTextGivesLineAndColumn) {
  expect_invalid("{\n  \"train_batch_size\": 16,\n  \"fp16\": {\"enabled\": true,}\n}",
                 {"ds_config.json:3:28: malformed JSON:", "unexpected '}'"});
  expect_invalid("{\"train_batch_size\": 16", {"ds_config.json:1:24: malformed JSON:"});
  expect_invalid(R"({"zero_optimization": {"stage": 1, "stage": 2}})",
                 {"zero_optimization.stage: key given twice in the same object"});
  // Comments are allowed: DeepSpeed reads configs with hjson.
  EXPECT_EQ(parse("{\n // ZeRO-2\n \"zero_optimization\": {\"stage\": 2} /* done */\n}")
                .config.zero_optimization.stage,
            2);
}

TEST(ConfigJson, UnknownKeysAreOneWarningListingThem) {
  const auto parsed = parse(R"({"train_batch_size": 8, "amp": {"enabled": false},
                                "zero_optimization": {"stage": 2, "round_robin_gradients": true},
                                "fp16": {"enabled": true, "auto_cast": false}})");
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_EQ(parsed.warnings[0],
            "ds_config.json: ignoring keys zero does not read: amp, fp16.auto_cast, "
            "zero_optimization.round_robin_gradients");
}

TEST(ConfigJson, UnbuiltFeaturesAreRejectedByName) {
  const char* text = R"({"zero_optimization": {"stage": 3, "allgather_partitions": false,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}},
    "optimizer": {"type": "OneBitLamb", "params": {"lr": 1e-3}}})";
  expect_error(
      text, ErrorKind::unsupported,
      {"ds_config.json: not supported yet:", "zero_optimization.allgather_partitions = false",
       "optimizer.type = \"OneBitLamb\"", "1-bit optimizers"});
  // Accepted on request (the estimator), with a warning rather than silence.
  const auto parsed = parse(text, config::UnbuiltFeatures::accept);
  EXPECT_EQ(parsed.config.zero_optimization.offload_param.device, config::OffloadDevice::nvme);
  EXPECT_FALSE(parsed.config.optimizer);
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_NE(parsed.warnings[0].find("not supported yet by the training engine"), std::string::npos);
  EXPECT_NE(parsed.warnings[0].find("optimizer.type = \"OneBitLamb\""), std::string::npos);
  // The same rule for a struct built in code.
  config::Config code;
  code.zero_optimization.allgather_partitions = false;
  EXPECT_THROW(config::require_built(code), zero::Error);
  EXPECT_NO_THROW(config::require_built(config::Config{}));
}

TEST(ConfigJson, ZeroPlusPlusKeys) {
  // qwZ is built: the engine gathers int8 weights (EngineOptions::quantized_weights).
  const auto parsed =
      parse(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true}})");
  EXPECT_TRUE(parsed.config.zero_optimization.zero_quantized_weights);
  EXPECT_TRUE(zero::EngineOptions::from_config(parsed.config).quantized_weights);
  EXPECT_FALSE(zero::EngineOptions::from_config(parse("{}").config).quantized_weights);
  expect_invalid(R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": true}})",
                 {"zero_optimization.zero_quantized_weights: quantizes stage 3's weight gathers, "
                  "so it needs ZeRO stage 3, got stage 2"});
  // hpZ too: the secondary partition (EngineOptions::hpz_partition_size).
  const auto hpz = parse(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})");
  EXPECT_EQ(zero::EngineOptions::from_config(hpz.config).hpz_partition_size, 8);
  EXPECT_EQ(zero::EngineOptions::from_config(parse("{}").config).hpz_partition_size, 1);
  expect_invalid(R"({"zero_optimization": {"stage": 1, "zero_hpz_partition_size": 2}})",
                 {"zero_optimization.zero_hpz_partition_size: cuts stage 3's weights a second "
                  "time, so it needs ZeRO stage 3, got stage 1"});
  // qgZ: the gradients' reduce-scatter, stages 1-3 (EngineOptions::quantized_gradients).
  const auto qgz =
      parse(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})");
  EXPECT_TRUE(zero::EngineOptions::from_config(qgz.config).quantized_gradients);
  EXPECT_EQ(zero::EngineOptions::from_config(qgz.config).gradient_quantization()->bits, 4);
  EXPECT_FALSE(zero::EngineOptions::from_config(parse("{}").config).gradient_quantization());
  expect_invalid(R"({"zero_optimization": {"stage": 0, "zero_quantized_gradients": true}})",
                 {"zero_optimization.zero_quantized_gradients: quantizes the gradients' "
                  "reduce-scatter, so it needs ZeRO stage 1, 2 or 3 (stage 0 all-reduces them)"});
}

TEST(ConfigJson, OffloadAndCheckpointingConsistency) {
  expect_invalid(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
                 {"zero_optimization.offload_param: needs ZeRO stage 3, got stage 2"});
  expect_invalid(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})",
                 {"zero_optimization.offload_optimizer: needs ZeRO stage 1, 2 or 3, got stage 0"});
  expect_invalid(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})",
                 {"zero_optimization.offload_optimizer.nvme_path: required with device \"nvme\""});
  expect_invalid(R"({"activation_checkpointing": {"contiguous_memory_optimization": true}})",
                 {"activation_checkpointing.number_checkpoints: required with "
                  "contiguous_memory_optimization = true"});
  expect_invalid(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
                 {"fp16 and bf16 cannot both be enabled"});
  // The deprecated switch is read as DeepSpeed reads it: its modern form.
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})")
                .config.zero_optimization.offload_optimizer.device,
            config::OffloadDevice::cpu);
}

TEST(ConfigJson, Fp16LossScaleDefaultsFollowDeepSpeedsQuirk) {
  // No dynamic-loss-scale key: the ZeRO optimizers' scaler defaults, 2^32 and hysteresis 1.
  auto fp16 =
      parse(R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}})").config.fp16;
  EXPECT_EQ(fp16.initial_scale_power, 32);
  EXPECT_EQ(fp16.hysteresis, 1);
  EXPECT_EQ(fp16.loss_scale_window, 1000);
  EXPECT_EQ(fp16.min_loss_scale, 1.0);
  // Stage 0 (DeepSpeed's FP16_Optimizer) starts at 2^16.
  EXPECT_EQ(parse(R"({"fp16": {"enabled": true}})").config.fp16.initial_scale_power, 16);
  // Any one of the keys brings in all the documented JSON defaults.
  fp16 = parse(R"({"fp16": {"enabled": true, "loss_scale_window": 200},
                   "zero_optimization": {"stage": 2}})")
             .config.fp16;
  EXPECT_EQ(fp16.initial_scale_power, 16);
  EXPECT_EQ(fp16.hysteresis, 2);
  EXPECT_EQ(fp16.loss_scale_window, 200);
  // A static scale.
  fp16 = parse(R"({"fp16": {"enabled": true, "loss_scale": 128}})").config.fp16;
  EXPECT_FALSE(fp16.dynamic_loss_scale());
  EXPECT_EQ(fp16.loss_scale, 128.0);
}

// zero's own key for 8-bit moments: Adam's and AdamW's, 8 or 32.
TEST(ConfigJson, MomentBits) {
  EXPECT_EQ(zero::EngineOptions::from_config(
                parse(R"({"optimizer": {"type": "AdamW", "params": {"moment_bits": 8}}})").config)
                .moments,
            zero::MomentStorage::blockwise_8bit);
  EXPECT_EQ(zero::EngineOptions::from_config(
                parse(R"({"optimizer": {"type": "Adam", "params": {"moment_bits": 32}}})").config)
                .moments,
            zero::MomentStorage::fp32);
  EXPECT_EQ(zero::EngineOptions::from_config(parse("{}").config).moments,
            zero::MomentStorage::fp32);
  expect_invalid(R"({"optimizer": {"type": "Adam", "params": {"moment_bits": 16}}})",
                 {"optimizer.params.moment_bits", "expected 8", "got 16"});
  expect_invalid(R"({"optimizer": {"type": "Lamb", "params": {"moment_bits": 8}}})",
                 {"optimizer.params.moment_bits", "built for Adam and AdamW, not Lamb"});
}

// zero's own key for split master weights: 8 or 16 bits of residual, not for Lamb.
TEST(ConfigJson, MasterResidualBits) {
  const auto master = [](const char* json) {
    return zero::EngineOptions::from_config(parse(json).config).master;
  };
  EXPECT_EQ(master(R"({"bf16": {"enabled": true},
                       "optimizer": {"type": "AdamW", "params": {"master_residual_bits": 8}}})"),
            zero::MasterStorage::split_8bit);
  EXPECT_EQ(master(R"({"fp16": {"enabled": true},
                       "optimizer": {"type": "SGD", "params": {"master_residual_bits": 16}}})"),
            zero::MasterStorage::split_16bit);
  EXPECT_EQ(master("{}"), zero::MasterStorage::fp32);
  expect_invalid(R"({"optimizer": {"type": "Adam", "params": {"master_residual_bits": 12}}})",
                 {"optimizer.params.master_residual_bits", "expected 8 or 16", "got 12"});
  expect_invalid(R"({"optimizer": {"type": "Lamb", "params": {"master_residual_bits": 8}}})",
                 {"optimizer.params.master_residual_bits", "built for Adam, AdamW and SGD"});
  // fp32 training has no compute copy to split over: the engine's options refuse it.
  auto options = zero::EngineOptions::from_config(
      parse(R"({"optimizer": {"type": "Adam", "params": {"master_residual_bits": 8}}})").config);
  try {
    options.validate();
    FAIL() << "fp32 training with split masters was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("with compute_dtype float32"), std::string::npos)
        << e.what();
  }
}

TEST(ConfigJson, OptimizerNamesAndAdamWMode) {
  auto optimizer = *parse(R"({"optimizer": {"type": "adam", "params": {"weight_decay": 0.01}}})")
                        .config.optimizer;
  EXPECT_EQ(optimizer.type, config::OptimizerType::adam);
  EXPECT_TRUE(optimizer.decoupled_weight_decay()); // DeepSpeed's adam_w_mode defaults to true
  optimizer = *parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})")
                   .config.optimizer;
  EXPECT_FALSE(optimizer.decoupled_weight_decay());
  optimizer = *parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9,
                                        "nesterov": true}}})")
                   .config.optimizer;
  EXPECT_EQ(optimizer.type, config::OptimizerType::sgd);
  EXPECT_EQ(optimizer.lr, 0.1);
  EXPECT_EQ(optimizer.momentum, 0.9);
  EXPECT_TRUE(optimizer.nesterov);
  EXPECT_FALSE(optimizer.decoupled_weight_decay());
  expect_error(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
               ErrorKind::unsupported, {"optimizer.params.amsgrad = true"});
  expect_invalid(R"({"optimizer": {"params": {"lr": 1}}})",
                 {"optimizer.type: missing; the optimizer section needs it"});
  // DeepSpeed's bias_correction false is built (FusedAdam, DeepSpeedCPUAdam, FusedLamb).
  optimizer = *parse(R"({"optimizer": {"type": "Adam", "params": {"bias_correction": false}}})")
                   .config.optimizer;
  EXPECT_FALSE(optimizer.bias_correction);
  EXPECT_TRUE(parse(R"({"optimizer": {"type": "AdamW"}})").config.optimizer->bias_correction);
}

TEST(ConfigJson, LambAndItsParameters) {
  auto optimizer = *parse(R"({"optimizer": {"type": "LAMB", "params": {"lr": 0.011,
      "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.01, "bias_correction": false,
      "max_coeff": 0.5, "min_coeff": 0.08}}})")
                        .config.optimizer;
  EXPECT_EQ(optimizer.type, config::OptimizerType::lamb);
  EXPECT_STREQ(config::to_string(optimizer.type), "Lamb");
  EXPECT_EQ(optimizer.lr, 0.011);
  EXPECT_EQ(optimizer.betas[1], 0.95);
  EXPECT_EQ(optimizer.eps, 1e-6);
  EXPECT_EQ(optimizer.weight_decay, 0.01);
  EXPECT_FALSE(optimizer.bias_correction);
  EXPECT_EQ(optimizer.max_coeff, 0.5);
  EXPECT_EQ(optimizer.min_coeff, 0.08);
  EXPECT_FALSE(optimizer.decoupled_weight_decay()); // decay goes into the update, as FusedLamb
  const auto defaults = *parse(R"({"optimizer": {"type": "lamb"}})").config.optimizer;
  EXPECT_EQ(defaults.max_coeff, 10.0); // FusedLamb's defaults
  EXPECT_EQ(defaults.min_coeff, 0.01);
  EXPECT_TRUE(defaults.bias_correction);
  expect_invalid(R"({"optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1.0}}})",
                 {"optimizer.params.max_grad_norm", "gradient_clipping"});
  expect_invalid(R"({"optimizer": {"type": "Lamb", "params": {"max_coeff": 0.1,
                   "min_coeff": 0.2}}})",
                 {"optimizer.params.min_coeff: min_coeff must not exceed max_coeff"});
  expect_error(R"({"optimizer": {"type": "Lamb", "params": {"eps_inside_sqrt": true}}})",
               ErrorKind::unsupported, {"optimizer.params.eps_inside_sqrt = true"});
  // The 1-bit optimizers stay refused, by name and with the reason.
  for (const char* type : {"OneBitAdam", "OneBitLamb", "ZeroOneAdam"})
    expect_error(std::string(R"({"optimizer": {"type": ")") + type + R"("}})",
                 ErrorKind::unsupported,
                 {std::string("optimizer.type = \"") + type + "\"", "1-bit optimizers"});
}

TEST(ConfigJson, SchedulerTypes) {
  auto scheduler = *parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {
      "total_num_steps": 1000, "warmup_num_steps": 50, "warmup_type": "linear",
      "cos_min_ratio": 0.1, "last_batch_iteration": 99}}})")
                        .config.scheduler;
  const auto& cosine = std::get<zero::WarmupCosineLR>(scheduler.schedule);
  EXPECT_EQ(cosine.total_num_steps, 1000);
  EXPECT_EQ(cosine.warmup_type, zero::WarmupType::linear);
  EXPECT_EQ(cosine.cos_min_ratio, 0.1);
  EXPECT_EQ(scheduler.last_batch_iteration, 99);
  scheduler = *parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4,
      "cycle_max_lr": 1e-3, "cycle_first_step_size": 100, "cycle_first_stair_count": 4,
      "decay_step_size": 10, "decay_lr_rate": 0.5}}})")
                   .config.scheduler;
  const auto& one_cycle = std::get<zero::OneCycle>(scheduler.schedule);
  EXPECT_EQ(one_cycle.cycle_max_lr, 1e-3);
  EXPECT_EQ(one_cycle.second_step_size(), 100.0);
  EXPECT_EQ(one_cycle.second_stair_count(), 4);
  EXPECT_TRUE(one_cycle.cycle_momentum);
  // As DeepSpeed: SGD has no betas, so momentum cycling is switched off with a note.
  const auto parsed = parse(R"({"optimizer": {"type": "SGD"}, "scheduler": {"type": "OneCycle",
      "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1}}})");
  EXPECT_FALSE(std::get<zero::OneCycle>(parsed.config.scheduler->schedule).cycle_momentum);
  EXPECT_EQ(parsed.warnings.size(), 1u);
  expect_invalid(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
                 {"scheduler.params.warmup_type: expected \"log\" or \"linear\", got \"cosine\""});
  expect_error(R"({"scheduler": {"type": "LRRangeTest", "params": {}}})", ErrorKind::unsupported,
               {"scheduler.type = \"LRRangeTest\""});
}

TEST(ConfigJson, FilesAndTheirErrors) {
  try {
    config::from_json_file("/nonexistent/ds_config.json");
    FAIL() << "no error for a missing file";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("cannot read config /nonexistent/ds_config.json"),
              std::string::npos);
  }
}

} // namespace

// Keys whose behaviour is fixed here are accepted with either value and change nothing the engine
// is given: gradients are always contiguous (each layer's gradient is written in place in its
// bucket or shard), zero's engine runs only its own optimizers, every one of them tested, and the
// average is one sum and one division wherever DeepSpeed would divide.
TEST(ConfigJson, FixedKeysChangeNothing) {
  for (const char* key :
       {"contiguous_gradients", "zero_allow_untested_optimizer", "prescale_gradients"}) {
    const bool in_zero = std::string(key) == "contiguous_gradients";
    auto with = [&](bool value) {
      const std::string v = value ? "true" : "false";
      const std::string text =
          in_zero
              ? R"({"zero_optimization": {"stage": 2, ")" + std::string(key) + R"(": )" + v + "}}"
              : R"({"zero_optimization": {"stage": 2}, ")" + std::string(key) + R"(": )" + v + "}";
      const auto parsed = parse(text);
      EXPECT_TRUE(parsed.warnings.empty()) << key;
      return zero::EngineOptions::from_config(parsed.config).shared_settings();
    };
    EXPECT_EQ(with(true), with(false)) << key;
  }
  EXPECT_TRUE(parse(R"({"gradient_predivide_factor": 8})").warnings.empty());
  // The optimizer's max_grad_norm is refused as DeepSpeed refuses it, for every optimizer.
  expect_invalid(
      R"({"optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})",
      {"optimizer.params.max_grad_norm: DeepSpeed does not take it", "\"gradient_clipping\""});
}

// Keys of the real configs that would train something else than asked: refused by name.
TEST(ConfigJson, ModelParallelismAnd16BitMastersAreRefusedByName) {
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"tensor_parallel": {"autotp_size": 4}})", "tensor_parallel.autotp_size = 4"},
           {R"({"sequence_parallel_size": 2})", "sequence_parallel_size = 2"},
           {R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}})",
            "bf16.bf16_master_weights_and_grads = true"},
           {R"({"bf16": {"enabled": true, "bf16_optimizer_states": true}})",
            "bf16.bf16_optimizer_states = true"},
           {R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})",
            "fp16.fp16_master_weights_and_grads = true"}}) {
    try {
      parse(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), zero::ErrorKind::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // One way is no model parallelism: accepted.
  EXPECT_TRUE(parse(R"({"tensor_parallel": {"autotp_size": 1}, "sequence_parallel_size": 1})")
                  .warnings.empty());
}
