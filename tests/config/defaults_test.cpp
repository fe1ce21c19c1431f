// DeepSpeed's defaults, the struct built in code versus the same options read from JSON, and the
// code shown in docs/configuration.md (taken from this file, so it cannot rot).

#include "config_test_support.hpp"

#include "zero/config/batch.hpp"
#include "zero/engine/options.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace config = zero::config;
using zero::testing::parse;

TEST(ConfigDefaults, AreDeepSpeeds) {
  const config::Config c;
  EXPECT_FALSE(c.train_batch_size || c.train_micro_batch_size_per_gpu ||
               c.gradient_accumulation_steps);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_FALSE(c.steps_per_print); // current DeepSpeed: None (older releases: 10)
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_FALSE(c.optimizer);
  EXPECT_FALSE(c.scheduler);
  const auto& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_FALSE(z.overlap_comm); // unset: zero overlaps at every stage
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500'000'000);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_EQ(z.allgather_bucket_size, 500'000'000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_FALSE(z.stage3_max_reuse_distance); // unset: kept only when acquired next
  EXPECT_EQ(z.offload_optimizer.device, config::OffloadDevice::none);
  EXPECT_EQ(z.offload_param.device, config::OffloadDevice::none);
  EXPECT_FALSE(c.activation_checkpointing.partition_activations);
  EXPECT_FALSE(c.activation_checkpointing.number_checkpoints);
  // An empty document is the default struct.
  EXPECT_EQ(parse("{}").config, c);
  // Unset keys leave the engine's defaults: overlap at every stage, release unless acquired next.
  const zero::EngineOptions engine = zero::EngineOptions::from_config(c);
  EXPECT_TRUE(engine.overlap_comm);
  EXPECT_EQ(engine.max_reuse_distance, 0u);
  EXPECT_TRUE(engine.reduce_scatter);
  EXPECT_EQ(engine.allgather_bucket_elements, 500'000'000u);
}

// example-begin config-in-code
zero::Config build_in_code() {
  zero::Config config;
  config.train_batch_size = 256;
  config.train_micro_batch_size_per_gpu = 8;
  config.gradient_clipping = 1.0;
  config.bf16.enabled = true;
  config.optimizer = zero::config::OptimizerConfig{
      .type = zero::config::OptimizerType::adamw, .lr = 3e-4, .weight_decay = 0.1};
  config.scheduler = zero::config::SchedulerConfig{
      zero::WarmupCosineLR{.total_num_steps = 10'000, .warmup_num_steps = 500}};
  config.zero_optimization.stage = 2;
  config.zero_optimization.reduce_bucket_size = 200'000'000;
  return config;
}
// example-end config-in-code

TEST(ConfigDefaults, CodeAndJsonAreTwoWaysToTheSameStruct) {
  const auto parsed = parse(R"({
    "train_batch_size": 256, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"total_num_steps": 10000, "warmup_num_steps": 500}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8}
  })");
  EXPECT_EQ(parsed.config, build_in_code());
  const config::BatchSizes sizes = config::resolve_batch_sizes(build_in_code(), 8);
  EXPECT_EQ(sizes.gradient_accumulation_steps, 4);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(ConfigDefaults, DocsShowTheCompiledExample) {
  const std::string source = read_text(__FILE__);
  const std::string begin = "// example-begin config-in-code\n";
  const std::size_t from = source.find(begin) + begin.size();
  const std::size_t to = source.find("// example-end config-in-code");
  ASSERT_LT(from, to);
  const std::string snippet = source.substr(from, to - from);
  const std::string docs = read_text(ZERO_DOCS_DIR "/configuration.md");
  EXPECT_NE(docs.find(snippet), std::string::npos)
      << "docs/configuration.md must show, verbatim, the example of " << __FILE__ << ":\n"
      << snippet;
}

} // namespace
