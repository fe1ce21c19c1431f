// The engine with model states on the NVMe tier (ZeRO-Infinity on the host), at 1, 2 and 3 ranks:
// - optimizer states on NVMe give the weights the in-memory engine gives, bit for bit, at stages
//   1-3, in fp32, fp16 and bf16, with gradient accumulation and with a step skipped on every rank
//   for an infinity on one; sub-groups that cut a layer and sub-groups that hold several layers,
//   pipelined or waited for, with one bounce slot or several;
// - stage 3's parameters on NVMe too (all of them, or the first layers kept in memory by
//   max_in_cpu; small layers kept gathered);
// - the memory report puts those states on NVMe and only bounce buffers in memory;
// - 8-bit moments swapped as codes give the weights of 8-bit moments in memory;
// - the swap files are gone when the engine is;
// - a config asking for NVMe while the engine's placement keeps states in memory is refused.

#include "training_scenario.hpp"

#include <zero/engine/optimizer_choice.hpp>
#include <zero/offload/nvme_stores.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/optim/quantized_moments.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

using zero::DType;
using namespace zero::testing;

using NvmeOptimizer = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
using NvmeEverything =
    zero::Placement<zero::optimizer_states_in<zero::nvme>, zero::parameters_in<zero::nvme>>;

// A directory for this run's swap files, the same on every rank, removed at the end.
class SwapRoot {
 public:
  SwapRoot() {
    auto& world = zero::testing::world();
    std::array<std::uint8_t, 256> name{};
    if (world.rank() == 0) {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "zero-engine-nvme-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
      std::copy_n(pattern.begin(), std::min(pattern.size(), name.size() - 1), name.begin());
    }
    world.broadcast(name, 0).wait();
    path_ = std::string(reinterpret_cast<const char*>(name.data()));
  }
  ~SwapRoot() {
    auto& world = zero::testing::world();
    world.barrier();
    if (world.rank() == 0) std::filesystem::remove_all(path_);
  }
  const std::filesystem::path& path() const { return path_; }
  // Nothing left under it but empty directories.
  bool holds_no_files() const {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_))
      if (entry.is_regular_file()) return false;
    return true;
  }

 private:
  std::filesystem::path path_;
};

struct Tier {
  std::size_t sub_group = 1024; // elements: one 4096-byte unit of fp32
  std::size_t buffers = 3;
  bool pipeline = true;
  std::size_t max_in_cpu = 0; // parameters kept in memory
};

zero::EngineOptions on_nvme(const SwapRoot& root, const Tier& tier) {
  zero::EngineOptions o;
  o.nvme.optimizer.nvme_path = root.path();
  o.nvme.optimizer.sub_group_size = tier.sub_group;
  o.nvme.optimizer.buffer_count = tier.buffers;
  o.nvme.optimizer.pipeline_read = o.nvme.optimizer.pipeline_write = tier.pipeline;
  o.nvme.parameters.nvme_path = root.path();
  o.nvme.parameters.max_in_cpu = tier.max_in_cpu;
  o.nvme.parameters.buffer_count = 3;
  o.nvme.parameters.buffer_size = 1 << 16;
  return o;
}

template <class Plan, class Where = NvmeOptimizer, class Scaler = zero::StaticLossScaler>
void expect_like_memory(const SwapRoot& root, const Scenario& run, const Tier& tier,
                        const std::string& what, Scaler scaler = Scaler{}) {
  const Outcome in_memory = train<Plan, zero::host, zero::Adam, Scaler>(run, scaler);
  const Outcome swapped = train<Plan, Where, zero::Adam, Scaler>(run, scaler, on_nvme(root, tier));
  EXPECT_NE(in_memory.weights[2][0], initial_value(2, 0)) << what << ": the weights moved";
  expect_same_weights(in_memory, swapped, true, what);
  ASSERT_EQ(in_memory.steps.size(), swapped.steps.size());
  for (std::size_t s = 0; s < swapped.steps.size(); ++s) {
    EXPECT_EQ(in_memory.steps[s].applied, swapped.steps[s].applied) << what << " step " << s;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(in_memory.steps[s].grad_norm),
              std::bit_cast<std::uint64_t>(swapped.steps[s].grad_norm))
        << what << " step " << s;
  }
  EXPECT_TRUE(root.holds_no_files()) << what << ": swap files left behind";
}

TEST(NvmeEngine, OptimizerStatesGiveTheWeightsOfMemory) {
  const SwapRoot root;
  const Scenario run{.accumulation = 2, .bucket = 37, .steps = 3, .wide_layer = 5000};
  for (const Tier tier : {Tier{}, Tier{.buffers = 1, .pipeline = false},
                          Tier{.sub_group = 3000, .buffers = 2}, Tier{.sub_group = 1 << 20}}) {
    const std::string what = "sub-groups of " + std::to_string(tier.sub_group) + ", " +
                             std::to_string(tier.buffers) + " slots" +
                             (tier.pipeline ? ", pipelined" : "");
    expect_like_memory<zero::Stage<1>>(root, run, tier, "stage 1, " + what);
    expect_like_memory<zero::Stage<2>>(root, run, tier, "stage 2, " + what);
    expect_like_memory<zero::Stage<3>>(root, run, tier, "stage 3, " + what);
  }
}

TEST(NvmeEngine, HalfPrecisionAndClipping) {
  const SwapRoot root;
  expect_like_memory<zero::Stage<2>>(
      root, {.dtype = DType::float16, .clipping = 0.05, .bucket = 11, .wide_layer = 3000}, {},
      "fp16, clipped");
  expect_like_memory<zero::Stage<3>>(
      root, {.dtype = DType::bfloat16, .accumulation = 3, .wide_layer = 3000}, {}, "bf16");
}

TEST(NvmeEngine, AnOverflowSkipsTheStepOnNvmeToo) {
  const SwapRoot root;
  zero::DynamicLossScalerOptions scaling;
  scaling.init_scale = 1024;
  scaling.hysteresis = 1;
  const Scenario run{.dtype = DType::float16, .steps = 4, .scale = 1024, .infinity_step = 2};
  expect_like_memory<zero::Stage<2>, NvmeOptimizer, zero::DynamicLossScaler>(
      root, run, {}, "fp16 with a skipped step", zero::DynamicLossScaler(scaling));
}

TEST(NvmeEngine, Stage3ParametersOnNvmeToo) {
  const SwapRoot root;
  const Scenario run{.accumulation = 2, .steps = 3, .wide_layer = 5000};
  expect_like_memory<zero::Stage<3>, NvmeEverything>(root, run, {}, "all parameters on NVMe");
  expect_like_memory<zero::Stage<3>, NvmeEverything>(root, run, {.max_in_cpu = 400},
                                                     "the first layers in memory");
  expect_like_memory<zero::Stage<3>, NvmeEverything>(
      root, {.steps = 3, .persistence = 50, .wide_layer = 5000}, {}, "small layers kept gathered");
}

TEST(NvmeEngine, TheReportPutsTheStatesOnNvme) {
  const SwapRoot root;
  const Scenario run{.steps = 1, .wide_layer = 5000};
  const Outcome memory = train<zero::Stage<3>>(run);
  const Outcome swapped =
      train<zero::Stage<3>, NvmeEverything>(run, zero::StaticLossScaler{}, on_nvme(root, {}));
  const zero::MemoryReport& m = swapped.memory;
  EXPECT_STREQ(m.optimizer_tier, "nvme");
  EXPECT_STREQ(m.parameters_tier, "nvme");
  EXPECT_EQ(m.master_weights.memory + m.optimizer_states.memory + m.parameters.memory, 0u);
  // On disk: what memory held, each layer's block rounded up to whole 4096-byte units.
  EXPECT_GE(m.master_weights.nvme, memory.memory.master_weights.memory);
  EXPECT_GE(m.optimizer_states.nvme, memory.memory.optimizer_states.memory);
  EXPECT_GE(m.parameters.nvme, memory.memory.parameters.memory);
  EXPECT_GT(m.buffers, memory.memory.buffers) << "the bounce buffers are counted";

  // max_in_cpu: the first layers' blocks count in memory, and only there.
  const Outcome split = train<zero::Stage<3>, NvmeEverything>(run, zero::StaticLossScaler{},
                                                              on_nvme(root, {.max_in_cpu = 400}));
  const zero::StateBytes& p = split.memory.parameters;
  EXPECT_GT(p.memory, 0u);
  EXPECT_LT(p.nvme, m.parameters.nvme);
  EXPECT_LE(p.memory + p.nvme, m.parameters.nvme) << "a block kept in memory is not on NVMe too";
}

// 8-bit moments swapped as their codes (offload/nvme_blockwise_moments.hpp): the weights of 8-bit
// moments in memory, bit for bit, at stages 1-3, with sub-groups that cut the wide layer (4096
// elements: two blocks of 2048 at a time) and one sub-group for everything; the small layers keep
// fp32 moments on NVMe, the 8-bit layers 1 byte an element and moment.
TEST(NvmeEngine, EightBitMomentsGiveTheWeightsOfEightBitMomentsInMemory) {
  const SwapRoot root;
  zero::EngineOptions eight_bit;
  eight_bit.moments = zero::MomentStorage::blockwise_8bit;
  eight_bit.eight_bit_min_elements = 1000;
  const Scenario runs[] = {
      {.accumulation = 2, .bucket = 1000, .steps = 3, .wide_layer = 5 * 2048 + 300},
      {.dtype = DType::bfloat16, .bucket = 700, .steps = 3, .wide_layer = 5 * 2048 + 300}};
  for (const Scenario& run : runs)
    for (const Tier tier :
         {Tier{.sub_group = 4096}, Tier{.sub_group = 1 << 20, .buffers = 1, .pipeline = false}}) {
      zero::EngineOptions swapped = on_nvme(root, tier);
      swapped.moments = eight_bit.moments;
      swapped.eight_bit_min_elements = eight_bit.eight_bit_min_elements;
      const std::string what = std::string(zero::to_string(run.dtype)) + ", sub-groups of " +
                               std::to_string(tier.sub_group);
      const auto expect_alike = [&](const Outcome& memory, const Outcome& nvme, const char* stage) {
        EXPECT_NE(memory.weights[5][0], initial_value(5, 0)) << stage << ", " << what;
        expect_same_weights(memory, nvme, true, std::string(stage) + ", " + what);
        EXPECT_GT(nvme.memory.optimizer_states.memory, 0u) << "the block scales stay in memory";
      };
      const Outcome swapped_8bit =
          train<zero::Stage<1>, NvmeOptimizer>(run, zero::StaticLossScaler{}, swapped);
      expect_alike(train<zero::Stage<1>>(run, zero::StaticLossScaler{}, eight_bit), swapped_8bit,
                   "stage 1");
      // On disk, per moment: each layer's block (a multiple of 2048 elements on every rank) as
      // codes where 8-bit, fp32 values elsewhere, rounded up to 4096 bytes; in memory its scales.
      const std::size_t ranks = std::size_t(zero::testing::world().size());
      std::size_t on_disk = 0, in_memory = 0;
      for (std::size_t l = 0; l < swapped_8bit.flat_sizes.size(); ++l) {
        const std::size_t block = swapped_8bit.flat_sizes[l] / ranks;
        const bool quantized = swapped_8bit.weights[l].size() >= eight_bit.eight_bit_min_elements;
        const std::size_t bytes = quantized ? block : sizeof(float) * block;
        on_disk += 2 * ((bytes + 4095) / 4096 * 4096);
        in_memory += quantized ? 2 * sizeof(float) * zero::quantized_blocks(block) : 0;
      }
      EXPECT_EQ(swapped_8bit.memory.optimizer_states.nvme, on_disk) << what;
      EXPECT_EQ(swapped_8bit.memory.optimizer_states.memory, in_memory) << what;
      expect_alike(train<zero::Stage<2>>(run, zero::StaticLossScaler{}, eight_bit),
                   train<zero::Stage<2>, NvmeOptimizer>(run, zero::StaticLossScaler{}, swapped),
                   "stage 2");
      expect_alike(train<zero::Stage<3>>(run, zero::StaticLossScaler{}, eight_bit),
                   train<zero::Stage<3>, NvmeEverything>(run, zero::StaticLossScaler{}, swapped),
                   "stage 3");
      EXPECT_TRUE(root.holds_no_files()) << what << ": swap files left behind";
    }
}

// Split masters with their residuals swapped (offload/nvme_residuals.hpp): the weights of split
// masters in memory, bit for bit, at stages 1-3, with 8- and 16-bit residuals beside fp32 and
// 8-bit moments, sub-groups that cut the wide layer and one sub-group for everything; on disk
// each layer's block of residuals, 1 or 2 bytes an element rounded up to 4096 bytes, and no master
// weights in memory. With the parameters on NVMe too the step would write a staging buffer, not
// the compute copy the residuals complete: refused, naming offload_param.
TEST(NvmeEngine, SplitMastersGiveTheWeightsOfSplitMastersInMemory) {
  const SwapRoot root;
  struct Case {
    Scenario run;
    zero::MasterStorage master;
    bool eight_bit_moments;
  };
  const Case cases[] = {{{.dtype = DType::bfloat16,
                          .accumulation = 2,
                          .bucket = 700,
                          .steps = 3,
                          .wide_layer = 5 * 2048 + 300},
                         zero::MasterStorage::split_8bit,
                         false},
                        {{.dtype = DType::float16,
                          .clipping = 0.05,
                          .bucket = 1000,
                          .steps = 3,
                          .wide_layer = 5 * 2048 + 300},
                         zero::MasterStorage::split_16bit,
                         true}};
  for (const Case& c : cases)
    for (const Tier tier :
         {Tier{.sub_group = 4096}, Tier{.sub_group = 1 << 20, .buffers = 1, .pipeline = false}}) {
      zero::EngineOptions in_memory;
      in_memory.master = c.master;
      if (c.eight_bit_moments) {
        in_memory.moments = zero::MomentStorage::blockwise_8bit;
        in_memory.eight_bit_min_elements = 1000;
      }
      zero::EngineOptions swapped = on_nvme(root, tier);
      swapped.master = in_memory.master;
      swapped.moments = in_memory.moments;
      swapped.eight_bit_min_elements = in_memory.eight_bit_min_elements;
      const std::string what = std::string(zero::to_string(c.master)) + ", " +
                               zero::to_string(c.run.dtype) + ", sub-groups of " +
                               std::to_string(tier.sub_group);
      const auto expect_alike = [&](const Outcome& memory, const Outcome& nvme, const char* stage) {
        EXPECT_NE(memory.weights[5][0], initial_value(5, 0)) << stage << ", " << what;
        expect_same_weights(memory, nvme, true, std::string(stage) + ", " + what);
      };
      const Outcome stage1 =
          train<zero::Stage<1>, NvmeOptimizer>(c.run, zero::StaticLossScaler{}, swapped);
      expect_alike(train<zero::Stage<1>>(c.run, zero::StaticLossScaler{}, in_memory), stage1,
                   "stage 1");
      const std::size_t ranks = std::size_t(zero::testing::world().size());
      const std::size_t bytes = c.master == zero::MasterStorage::split_8bit ? 1 : 2;
      std::size_t on_disk = 0;
      for (const std::size_t flat : stage1.flat_sizes)
        on_disk += (flat / ranks * bytes + 4095) / 4096 * 4096;
      EXPECT_EQ(stage1.memory.master_weights.nvme, on_disk) << what;
      EXPECT_EQ(stage1.memory.master_weights.memory, 0u) << what;
      expect_alike(train<zero::Stage<2>>(c.run, zero::StaticLossScaler{}, in_memory),
                   train<zero::Stage<2>, NvmeOptimizer>(c.run, zero::StaticLossScaler{}, swapped),
                   "stage 2");
      expect_alike(train<zero::Stage<3>>(c.run, zero::StaticLossScaler{}, in_memory),
                   train<zero::Stage<3>, NvmeOptimizer>(c.run, zero::StaticLossScaler{}, swapped),
                   "stage 3");
      EXPECT_TRUE(root.holds_no_files()) << what << ": swap files left behind";
    }
  zero::EngineOptions everything = on_nvme(root, {});
  everything.master = zero::MasterStorage::split_8bit;
  expect_error_contains(
      [&] {
        train<zero::Stage<3>, NvmeEverything>({.dtype = DType::bfloat16, .steps = 1},
                                              zero::StaticLossScaler{}, everything);
      },
      "with the parameters on NVMe (offload_param)");
}

// A directory only one rank lacks: every rank's engine throws, naming that rank, and none is left
// waiting in a collective the failing rank never reaches. Each store's directory in turn.
TEST(NvmeEngine, AFaultOnOneRankStopsEveryRank) {
  const SwapRoot root;
  auto& world = zero::testing::world();
  const int last = world.size() - 1;
  const std::filesystem::path missing = root.path() / "missing";
  const std::string needle = "failed on rank " + std::to_string(last) + ": nvme_path " +
                             missing.string() + " does not exist";
  for (const bool parameters : {false, true}) {
    zero::EngineOptions options = on_nvme(root, {});
    if (world.rank() == last)
      (parameters ? options.nvme.parameters.nvme_path : options.nvme.optimizer.nvme_path) = missing;
    expect_error_contains(
        [&] {
          zero::Engine<zero::Stage<3>, zero::MpiCommunicator, NvmeEverything, zero::Adam,
                       zero::StaticLossScaler>
              engine(world, model(), zero::Adam{}, zero::StaticLossScaler{}, options);
        },
        needle);
  }
  // Every rank is here, and the communicator still works; only then may the files be counted (a
  // slower rank may still be removing its own).
  std::vector<int> one{1};
  world.all_reduce(one, zero::ReduceOp::sum).wait();
  EXPECT_EQ(one[0], world.size());
  EXPECT_TRUE(root.holds_no_files()) << "the ranks that built their files removed them";
}

TEST(NvmeEngine, AConfigAskingForNvmeNeedsThePlacement) {
  zero::EngineOptions options;
  options.offload_optimizer = zero::config::OffloadDevice::nvme;
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                     zero::StaticLossScaler>
            engine(zero::testing::world(), model(), zero::Adam{}, zero::StaticLossScaler{},
                   options);
      },
      "offload_optimizer.device = \"nvme\", but this engine keeps them in memory");
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, NvmeOptimizer, zero::Adam,
                     zero::StaticLossScaler>
            engine(zero::testing::world(), model(), zero::Adam{}, zero::StaticLossScaler{}, {});
      },
      "optimizer states on NVMe need a directory: set EngineOptions::nvme.optimizer.nvme_path");
}

// LAMB's step needs whole-parameter sums the NVMe store's sub-group pipeline does not make: such an
// engine does not compile (tests/engine/compile_fail), and a program taking its optimizer from a
// config compiles the others and refuses LAMB by name.
TEST(NvmeEngine, LambFromAConfigIsRefusedNamingTheKey) {
  zero::config::OptimizerConfig lamb;
  lamb.type = zero::config::OptimizerType::lamb;
  int built = 0;
  expect_error_contains(
      [&] { zero::with_optimizer_on<NvmeOptimizer>(lamb, [&](auto) { return ++built; }); },
      "optimizer.type Lamb: an optimizer with a trust ratio (LAMB) keeps its states in memory");
  EXPECT_EQ(built, 0);
  static_assert(!zero::optimizer_runs_on<zero::Lamb, NvmeOptimizer>());
  static_assert(zero::optimizer_runs_on<zero::Adam, NvmeOptimizer>());
  zero::config::OptimizerConfig adam;
  adam.type = zero::config::OptimizerType::adam;
  EXPECT_EQ(zero::with_optimizer_on<NvmeOptimizer>(adam, [&](auto) { return ++built; }), 1);
}

} // namespace
