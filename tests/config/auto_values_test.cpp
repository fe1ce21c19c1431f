// "auto" (in 11 of 63 real configs): the program's values fill each "auto" at its path, as Hugging
// Face's Trainer fills them, and every "auto" left is named in one error (not one key per run).

#include "config_test_support.hpp"

#include <zero/config/auto_values.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace {

using zero::testing::parse;

template <class Call>
void expect_error(Call&& call, const std::vector<std::string>& pieces) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument) << e.what();
    for (const std::string& piece : pieces)
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
          << "missing '" << piece << "' in: " << e.what();
  }
}

// The shape of the Trainer's ZeRO-3 example config.
constexpr const char* trainer_config = R"({
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                "warmup_num_steps": "auto"}},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                        "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto"},
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"
})";

zero::config::Config read(const char* text, const zero::config::AutoValues& values) {
  zero::config::ParseOptions options{.source = "ds_config.json", .auto_values = values};
  return zero::config::from_json_string(text, options);
}

TEST(AutoValues, TheProgramsValuesFillEveryAuto) {
  const zero::config::TrainerValues mine{.micro_batch_per_rank = 4,
                                         .gradient_accumulation_steps = 2,
                                         .lr = 3e-4,
                                         .betas = std::array<double, 2>{0.9, 0.95},
                                         .eps = 1e-6,
                                         .weight_decay = 0.1,
                                         .max_grad_norm = 1.0,
                                         .dtype = "bf16",
                                         .warmup_steps = 100,
                                         .hidden_size = 1024};
  const zero::config::Config c = read(trainer_config, mine.auto_values(/*world_size=*/3));
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.train_batch_size, 24);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_TRUE(c.bf16.enabled);
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->lr, 3e-4);
  EXPECT_EQ(c.optimizer->betas[1], 0.95);
  EXPECT_EQ(c.optimizer->eps, 1e-6);
  EXPECT_EQ(c.optimizer->weight_decay, 0.1);
  ASSERT_TRUE(c.scheduler);
  const auto& warmup = std::get<zero::WarmupLR>(c.scheduler->schedule);
  EXPECT_EQ(warmup.warmup_min_lr, 0.0);
  EXPECT_EQ(warmup.warmup_max_lr, 3e-4);
  EXPECT_EQ(warmup.warmup_num_steps, 100);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 943'718); // 0.9 h^2
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 10'240);
}

TEST(AutoValues, EveryAutoLeftIsNamedInOneError) {
  const zero::config::TrainerValues some{
      .micro_batch_per_rank = 4, .gradient_accumulation_steps = 1, .lr = 1e-3, .dtype = "fp32"};
  expect_error([&] { read(trainer_config, some.auto_values(2)); },
               {"ds_config.json: \"auto\" needs a value from the program", "for 8 keys:",
                "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
                "scheduler.params.warmup_num_steps", "zero_optimization.reduce_bucket_size",
                "zero_optimization.stage3_prefetch_bucket_size",
                "zero_optimization.stage3_param_persistence_threshold", "gradient_clipping"});
  // Without values, every one of them.
  expect_error([&] { parse(trainer_config); },
               {"for 16 keys:", "train_batch_size", "fp16.enabled"});
}

// example-begin trainer-values
zero::Config read_with_my_values(const std::string& path, int world_size) {
  zero::config::TrainerValues mine{.micro_batch_per_rank = 8,
                                   .gradient_accumulation_steps = 2,
                                   .lr = 3e-4,
                                   .max_grad_norm = 1.0,
                                   .dtype = "bf16",
                                   .hidden_size = 1024};
  zero::config::ParseOptions options;
  options.auto_values = mine.auto_values(world_size);
  return zero::config::from_json_file(path, options);
}
// example-end trainer-values

TEST(AutoValues, TheGuidesExampleReadsAFile) {
  const std::string path = ::testing::TempDir() + "auto_values_guide.json";
  std::ofstream(path) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}, "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})";
  const zero::Config c = read_with_my_values(path, 2);
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.optimizer->lr, 3e-4);
}

TEST(AutoValues, AnAutoInAKeyZeroDoesNotReadGoesWithThatKey) {
  // DeepSpeed-ZenFlow's section is not read: its "auto"s join the warning, not an error.
  const auto parsed = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
    "zenflow": {"select_interval": "auto", "topk_ratio": 0.1}}})");
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_NE(parsed.warnings[0].find("zero_optimization.zenflow"), std::string::npos);
  // A required key left "auto" is named as such, not as missing.
  expect_error([] { parse(R"({"optimizer": {"type": "auto"}, "fp16": {"enabled": "auto"}})"); },
               {"for 2 keys:\n  fp16.enabled\n  optimizer.type"});
}

// Found by the fuzzer: train_mlp's widest layer is the hidden size, and 3333333333 squared
// overflowed int64.
TEST(AutoValues, HugeSizesSaturateInsteadOfOverflowing) {
  const zero::config::TrainerValues huge{.micro_batch_per_rank = std::int64_t(1) << 40,
                                         .gradient_accumulation_steps = std::int64_t(1) << 40,
                                         .hidden_size = 3'333'333'333};
  const zero::config::AutoValues v = huge.auto_values(1 << 20);
  EXPECT_EQ(v.at("zero_optimization.reduce_bucket_size").get<std::int64_t>(), std::int64_t(1)
                                                                                  << 62);
  EXPECT_EQ(v.at("train_batch_size").get<std::int64_t>(), std::int64_t(1) << 62);
  EXPECT_EQ(v.at("zero_optimization.stage3_param_persistence_threshold").get<std::int64_t>(),
            33'333'333'330);
}

TEST(AutoValues, OnlyTheStringAutoIsReplaced) {
  // A value given for a path whose config holds a number leaves the number.
  const auto c = read(R"({"train_batch_size": 16, "gradient_clipping": 0.5})",
                      {{"train_batch_size", 99}, {"gradient_clipping", 2.0}});
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_clipping, 0.5);
}

} // namespace
