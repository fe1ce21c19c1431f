// ZeRO-Infinity's offload_param beside a device: stage 3's parameter shards in host memory (pinned,
// or pageable) or on the NVMe tier, the optimizer states offloaded with them (host memory, or the
// NVMe tier). Each layer's block (read from NVMe into a bounce buffer first) is copied to the
// device on a copy stream of its own and the layer gathered there
// (offload/offloaded_parameters.hpp, offload/nvme_parameters.hpp); the host's step writes the new
// blocks into host memory, or through a staging buffer to NVMe.
// Against the HostThreads engine given the same gradients (device_engine_scenario.hpp): the same
// weights bit for bit and the same norms, with micro-steps, clipping, an overflow, layers kept
// gathered, a live bound of one layer, fp16 and bf16, split masters, 8-bit moments, the
// speculative and the delayed parameter update, LAMB and the NVMe tier; over the twin, with the
// compute stream held through each backward and step, so that a copy or a gather not ordered after
// the step's writes reads the weights before them. Over the twin in CI at 1-3 ranks, and over CUDA
// (label gpu).

#include "device_engine_scenario.hpp"

#include <zero/config/json.hpp>
#include <zero/core/half.hpp>
#include <zero/offload/offloaded_optimizer_store.hpp>
#include <zero/offload/offloaded_parameters.hpp>
#if ZERO_TEST_NVME
#include <zero/offload/nvme_stores.hpp>
#endif

#include <gtest/gtest.h>

#include <string>

namespace device_engine_test {

// example-begin offload-param-placement
// Stage 3's parameter shards and the optimizer states in pinned host memory, the gradients and
// the gathered layers in device memory.
using ParametersOffloaded =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::parameters_in<zero::pinned_host>,
                    zero::optimizer_states_in<zero::pinned_host>>;
// example-end offload-param-placement
using ParametersInPageableMemory =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::parameters_in<zero::host>,
                    zero::optimizer_states_in<zero::host>>;

template <class T, class Where = ParametersOffloaded, class Opt = zero::Adam>
void expect_host_bits(StagedSetup& s, const Scenario& run, const std::string& what) {
  expect_device_engine_equals_host<zero::Stage<3>, T, Where, Opt>(s, run, what);
}

TEST(OffloadParam, GivesTheHostEnginesBits) {
  StagedSetup s;
  expect_host_bits<zero::bfloat16>(
      s, {.dtype = DType::bfloat16, .accumulation = 2, .clipping = 0.05, .overflow_step = 1},
      "bf16, micro-steps, clipping, an overflow");
  expect_host_bits<zero::half>(s, {.dtype = DType::float16}, "fp16");
  // The three small layers stay gathered and are refreshed from the host's blocks after the step.
  expect_host_bits<zero::bfloat16>(s, {.dtype = DType::bfloat16, .persistence = 200},
                                   "bf16, small layers kept gathered");
  // At most the largest layer gathered at a time: no prefetch, every block copied when needed.
  expect_host_bits<zero::bfloat16>(s, {.dtype = DType::bfloat16, .max_live = 2100},
                                   "bf16, one layer live");
  expect_host_bits<zero::bfloat16, ParametersInPageableMemory>(s, {.dtype = DType::bfloat16},
                                                               "bf16, pageable host memory");
}

// What the offloaded optimizer store does on its own, it does with the parameters on the host:
// split masters read their high parts from its staging, 8-bit moments, the speculative update
// (the host engine steps without it), LAMB's step over the shard group.
TEST(OffloadParam, ComposesWithTheOffloadedStoresOptions) {
  StagedSetup s;
  expect_host_bits<zero::bfloat16>(s,
                                   {.dtype = DType::bfloat16,
                                    .accumulation = 2,
                                    .eight_bit_moments = true,
                                    .master = zero::MasterStorage::split_16bit},
                                   "split masters, 8-bit moments");
  expect_host_bits<zero::bfloat16>(
      s, {.dtype = DType::bfloat16, .steps = 4, .overflow_step = 2, .speculative = true},
      "speculative update");
  expect_host_bits<zero::bfloat16, ParametersOffloaded, zero::Lamb>(s, {.dtype = DType::bfloat16},
                                                                    "LAMB");
}

// The delayed parameter update from the first update on: each step's update runs on the host
// while the next step's forward and backward gather the blocks before it, and its new blocks are
// written into host memory when the next step sends them. Against the host engine given the
// gradients of the weights one step earlier (as offload_test.cpp's DPU test).
TEST(OffloadParam, DelayedParameterUpdateLagsOneStep) {
  StagedSetup s;
  const Scenario delayed{.dtype = DType::bfloat16, .steps = 4, .delayed_after = 0};
  Scenario reference = delayed;
  reference.delayed_after = -1;
  reference.gradients_lag_after = 0;
  const Outcome host = train_on_host<zero::Stage<3>, zero::bfloat16>(reference);
  const Outcome device =
      train_on_device<zero::Stage<3>, zero::bfloat16, ParametersOffloaded>(s, delayed);
  expect_same_norms(device, host, "DPU from the start");
  expect_same_weights(device, host, "DPU from the start");
}

#if ZERO_TEST_TWIN
// The compute stream runs nothing from the start of each backward to the end of its step unless
// waited for: the step's host-to-host copies of the new blocks run only then, and a block copied
// to the device before them would gather the old weights.
TEST(OffloadParam, HeldComputeStreamGivesTheHostEnginesBits) {
  StagedSetup s;
  constexpr std::size_t everything = 1 << 20;
  expect_host_bits<zero::bfloat16>(s,
                                   {.dtype = DType::bfloat16,
                                    .accumulation = 2,
                                    .bucket = everything,
                                    .persistence = 200,
                                    .held = true},
                                   "held, small layers kept gathered");
  expect_host_bits<zero::bfloat16>(s, {.dtype = DType::bfloat16, .held = true}, "held");
}
#endif

#if ZERO_TEST_NVME
// The parameters in pinned host memory, the optimizer states on the NVMe tier behind them.
TEST(OffloadParam, BesideOptimizerStatesOnNvmeGivesTheHostEnginesBits) {
  using Where =
      zero::Placement<zero::execute_on<DeviceSpace>, zero::parameters_in<zero::pinned_host>,
                      zero::optimizer_states_in<zero::nvme>>;
  StagedSetup s;
  SharedDir swap("zero-offload-param-nvme-");
  const Scenario run{.dtype = DType::bfloat16, .accumulation = 2, .nvme_path = swap.path};
#if !ZERO_TEST_TWIN
  if (const auto why = io_uring_refused<zero::Stage<3>, Where>(s, run))
    GTEST_SKIP() << zero::testing::not_applicable << "this GPU machine: " << *why;
#endif
  expect_host_bits<zero::bfloat16, Where>(s, run, "optimizer states on NVMe");
}

// example-begin offload-param-nvme-placement
// Stage 3's parameter shards and the optimizer states on the NVMe tier (GPU <- host <- NVMe).
using ParametersOnNvme =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::parameters_in<zero::nvme>,
                    zero::optimizer_states_in<zero::nvme>>;
// example-end offload-param-nvme-placement

// Each block read from NVMe into a bounce buffer and copied from there to the device; the step
// writes the new blocks to NVMe through the staging buffers, one layer filled while the one before
// it is handed on. With every block on NVMe, with the first layers kept in memory (max_in_cpu), and
// with the small layers kept gathered, and with a rank that has nothing of a layer.
TEST(OffloadParam, OnNvmeGivesTheHostEnginesBits) {
  StagedSetup s;
  SharedDir swap("zero-offload-param-on-nvme-");
#if !ZERO_TEST_TWIN
  if (const auto why = io_uring_refused<zero::Stage<3>, ParametersOnNvme>(
          s, {.dtype = DType::bfloat16, .nvme_path = swap.path}))
    GTEST_SKIP() << zero::testing::not_applicable << "this GPU machine: " << *why;
#endif
  expect_host_bits<zero::bfloat16, ParametersOnNvme>(s,
                                                     {.dtype = DType::bfloat16,
                                                      .accumulation = 2,
                                                      .clipping = 0.05,
                                                      .overflow_step = 1,
                                                      .nvme_path = swap.path},
                                                     "bf16 on NVMe, micro-steps, an overflow");
  expect_host_bits<zero::half, ParametersOnNvme>(
      s,
      {.dtype = DType::float16,
       .persistence = 200,
       .nvme_path = swap.path,
       .parameters_in_cpu = 100},
      "fp16 on NVMe, the first layers in memory, small layers kept gathered");
  expect_host_bits<zero::bfloat16, ParametersOnNvme>(
      s, {.dtype = DType::bfloat16, .max_live = 2100, .nvme_path = swap.path},
      "bf16 on NVMe, one layer live");
  // Whole parameters per rank: at 3 ranks one rank has nothing of the second layer (a weight and
  // a bias), so the step hands that layer on with no block to write.
  using WholeParameters =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::WholeParameterGreedy>>;
  expect_device_engine_equals_host<WholeParameters, zero::bfloat16, ParametersOnNvme>(
      s, {.dtype = DType::bfloat16, .nvme_path = swap.path}, "bf16 on NVMe, whole parameters");
#if ZERO_TEST_TWIN
  expect_host_bits<zero::bfloat16, ParametersOnNvme>(
      s, {.dtype = DType::bfloat16, .persistence = 200, .held = true, .nvme_path = swap.path},
      "bf16 on NVMe, held, small layers kept gathered");
#endif

  zero::EngineOptions options = options_for({.dtype = DType::bfloat16, .nvme_path = swap.path});
  {
    const DeviceEngine<zero::Stage<3>, zero::bfloat16, ParametersOnNvme> engine(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    const zero::MemoryReport m = engine.memory();
    EXPECT_STREQ(m.parameters_tier, zero::nvme::space_name);
    EXPECT_GT(m.parameters.nvme, 0u);
  }
  options.offload_ratio = 0.5;
  try {
    DeviceEngine<zero::Stage<3>, zero::bfloat16, ParametersOnNvme> split(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    ADD_FAILURE() << "offload_ratio 0.5 accepted with the parameters on NVMe";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_ratio below 1 keeps part of the states in device "
                                         "memory beside host memory; on the NVMe tier it is not "
                                         "built"),
              std::string::npos)
        << e.what();
  }
}
#endif

// The memory report puts the parameters in pinned host memory, as many bytes as stage 3 keeps on
// the device without offloading; a config's offload_param.device = "cpu" is what this placement
// does. A ratio below 1, and offload_param = "cpu" for an engine keeping them on the device, are
// refused by name.
TEST(OffloadParam, ReportsTheHostParametersAndRefusesWhatItCannotRun) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  const DeviceEngine<zero::Stage<3>, zero::bfloat16> on_device(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
  options.offload_param = options.offload_optimizer = zero::config::OffloadDevice::cpu;
  const DeviceEngine<zero::Stage<3>, zero::bfloat16, ParametersOffloaded> offloaded(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
  const zero::MemoryReport m = offloaded.memory();
  EXPECT_STREQ(m.parameters_tier, "pinned_host");
  EXPECT_STREQ(m.gradients_tier, DeviceMemory::name);
  EXPECT_EQ(m.parameters.memory, on_device.memory().parameters.memory);
  EXPECT_EQ(m.parameters.nvme, 0u);

  const auto refused = [&](zero::EngineOptions asked, auto build, const std::string& expected) {
    try {
      build(asked);
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  zero::EngineOptions split = options;
  split.offload_ratio = 0.5;
  refused(
      split,
      [&](const zero::EngineOptions& o) {
        DeviceEngine<zero::Stage<3>, zero::bfloat16, ParametersOffloaded> engine(
            world(), s.comm, model(), adam(), zero::StaticLossScaler{}, o, s.compute());
      },
      "with the parameters in host memory (offload_param) the whole update runs on the host");
  zero::EngineOptions on_the_device = options_for({.dtype = DType::bfloat16});
  on_the_device.offload_param = zero::config::OffloadDevice::cpu;
  refused(
      on_the_device,
      [&](const zero::EngineOptions& o) {
        DeviceEngine<zero::Stage<3>, zero::bfloat16> engine(
            world(), s.comm, model(), adam(), zero::StaticLossScaler{}, o, s.compute());
      },
      "zero_optimization.offload_param.device = \"cpu\", but this engine keeps them in device "
      "memory: keep stage 3's parameter shards in host memory with "
      "zero::parameters_in<zero::pinned_host>");
}

} // namespace device_engine_test
