// Every DeepSpeed config of the background texts (tests/config/seed_configs) parses; those that
// ask for partitioned activations or CPU checkpointing are honoured where the loop has a
// tensor-parallel group and refused by name where it has none.

#include "config_test_support.hpp"

#include "zero/config/batch.hpp"
#include "zero/residual/checkpoint_plan.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <variant>

namespace {

namespace config = zero::config;
namespace fs = std::filesystem;

const fs::path seed_dir = ZERO_SEED_CONFIG_DIR;

config::Config read_seed(const std::string& name, config::UnbuiltFeatures unbuilt) {
  return config::from_json_file(seed_dir / name, {.unbuilt = unbuilt, .warn = {}});
}

TEST(SeedConfigs, EveryOneParses) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(seed_dir)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    std::vector<std::string> warnings;
    const config::Config c = config::from_json_file(
        entry.path(), {.unbuilt = config::UnbuiltFeatures::accept,
                       .warn = [&](std::string_view w) { warnings.emplace_back(w); }});
    // Nothing in them is unknown to zero: the only warning is about unbuilt features.
    for (const std::string& warning : warnings)
      EXPECT_NE(warning.find("not supported yet"), std::string::npos) << warning;
    EXPECT_EQ(c.train_batch_size, 16) << entry.path();
    EXPECT_TRUE(c.fp16.enabled);
    EXPECT_EQ(c.fp16.initial_scale_power, 32);
    EXPECT_TRUE(c.zero_allow_untested_optimizer);
    EXPECT_EQ(c.steps_per_print, 9'999'999'999);
    const auto& schedule = std::get<zero::WarmupDecayLR>(c.scheduler->schedule);
    EXPECT_EQ(schedule.total_num_steps, 300);
    EXPECT_EQ(schedule.warmup_max_lr, 3e-5);
    EXPECT_EQ(schedule.warmup_num_steps, 30);
    EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500'000'000);
    EXPECT_EQ(config::resolve_batch_sizes(c, 4).train_micro_batch_size_per_gpu, 4);
  }
  EXPECT_EQ(count, 5);
}

TEST(SeedConfigs, ZeroDpRunsAsIs) {
  for (const char* name : {"zero_dp_config.json", "zero_dp_initialize_dict.json"}) {
    const config::Config c = read_seed(name, config::UnbuiltFeatures::reject);
    EXPECT_EQ(c.zero_optimization.stage, 1);
    EXPECT_EQ(c.fp16.hysteresis, 2);
    EXPECT_EQ(c.fp16.loss_scale_window, 1000);
    EXPECT_FALSE(c.optimizer); // the script passes its own Adam
  }
  EXPECT_FALSE(read_seed("zero_dp_initialize_dict.json", config::UnbuiltFeatures::reject)
                   .zero_optimization.overlap_comm.value_or(false));
}

TEST(SeedConfigs, PartitionedActivationsNeedATensorParallelGroup) {
  // The reader accepts the keys; the checkpointing built from them refuses them by name where the
  // loop has no group to partition over, and honours them where it has one.
  struct Group final : zero::ActivationPartition {
    std::size_t parts() const override { return 2; }
    std::size_t part() const override { return 0; }
    zero::Work all_gather(zero::View<const float>, zero::View<float>) override { return {}; }
  } group;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"zero_r_config.json", "activation_checkpointing.partition_activations = true"},
      {"zero_off_config.json", "activation_checkpointing.partition_activations = true"},
      {"zero_infinity_config.json", "activation_checkpointing.partition_activations = true"}};
  for (const auto& [name, key] : cases) {
    const config::Config c = read_seed(name, config::UnbuiltFeatures::reject);
    try {
      (void)zero::ActivationCheckpointing::from_config(c.activation_checkpointing, 16);
      ADD_FAILURE() << name << " was accepted without a group";
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), zero::ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    EXPECT_EQ(zero::ActivationCheckpointing::from_config(c.activation_checkpointing, 16, &group)
                  .partition,
              &group)
        << name;
  }
  const config::Config infinity =
      read_seed("zero_infinity_config.json", config::UnbuiltFeatures::accept);
  EXPECT_EQ(infinity.zero_optimization.offload_param.nvme_path, "/local_nvme");
  EXPECT_TRUE(infinity.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_EQ(infinity.activation_checkpointing.number_checkpoints, 4);
}

} // namespace
