// The engine over a device stream space (Placement<execute_on<CudaStreamSpace>>; DeviceTwinSpace
// in CI, see staged_setup.hpp): every model state in the device's memory, the model states moved
// by the staged communicator (counted, as the engine counts every group), the engine's own
// collectives over a host MpiCommunicator, and the stores' kernels on a compute stream that is not
// the staged communicator's caller stream. Trained as a trainer on a GPU would: backward reads the
// acquired weights and writes the gradients through copies queued on the compute stream, without
// waiting for them. Stages 0-3, fp32 and bf16 (with micro-steps and clipping), against the
// HostThreads engine given the same gradients: the same weights bit for bit, and the same norms.
// Run under mpirun at 1-3 ranks. The training itself is device_engine_scenario.hpp's;
// ZeRO-Offload's placements are offload_test.cpp's.

#include "device_engine_scenario.hpp"
#include "test_outcome.hpp"

#include <zero/engine/optimizer_choice.hpp>
#include <zero/optim/lamb.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>

namespace device_engine_test {

TEST(DeviceEngine, Fp32GivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<float>(s, {.dtype = DType::float32});
}

#if ZERO_TEST_TWIN
// The compute stream held through each backward: every stage must start its reductions after the
// gradients' copies queued there (through the staged communicator pointed at the engine's stream)
// and update after them.
TEST(DeviceEngine, HeldBackwardGivesTheHostEnginesBits) {
  StagedSetup s;
  constexpr std::size_t everything = 1 << 20; // one bucket; every stage 3 layer kept gathered
  every_stage<float>(s, {.dtype = DType::float32,
                         .steps = 2,
                         .bucket = everything,
                         .persistence = everything,
                         .held = true});
  // bf16, two micro-steps where backward does not wait for the stream: stages 0 and 1 add them
  // locally; stages 2 and 3 reduce every micro-step through the one bucket, whose reuse in the
  // second waits for the first's collective (so for the held stream), and run one here.
  Scenario bf16{.dtype = DType::bfloat16,
                .accumulation = 2,
                .steps = 2,
                .bucket = everything,
                .persistence = everything,
                .held = true};
  expect_device_engine_equals_host<zero::Stage<0>, zero::bfloat16>(s, bf16, "bf16 held, stage 0");
  expect_device_engine_equals_host<zero::Stage<1>, zero::bfloat16>(s, bf16, "bf16 held, stage 1");
  bf16.accumulation = 1;
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16>(s, bf16, "bf16 held, stage 2");
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16>(s, bf16, "bf16 held, stage 3");
}
#endif

TEST(DeviceEngine, Bf16WithMicroStepsAndClippingGivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16>(s, {.dtype = DType::bfloat16, .accumulation = 2, .clipping = 0.05});
}

// Adam's moments in 8 bits in device memory (codes and scales), updated by the device's 8-bit
// step on the compute stream: the host engine's bits at every stage.
TEST(DeviceEngine, EightBitMomentsGiveTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16>(
      s, {.dtype = DType::bfloat16, .accumulation = 2, .clipping = 0.05, .eight_bit_moments = true},
      "8-bit moments, ");
  // An overflow skips the step on every rank: the moments' codes and scales stay as they were.
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16>(
      s, {.dtype = DType::bfloat16, .overflow_step = 1, .eight_bit_moments = true},
      "8-bit moments, an overflow at step 1, stage 3");
}

// The report counts the codes and scales where they are, in device memory: a code an element and
// a scale a block of 2048 for each moment of this rank's block of every layer, the host engine's
// bytes.
TEST(DeviceEngine, EightBitMomentsAreReportedInDeviceMemory) {
  StagedSetup s;
  const Scenario run{.dtype = DType::bfloat16, .eight_bit_moments = true};
  DeviceEngine<zero::Stage<2>, zero::bfloat16> device(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  std::size_t expected = 0;
  for (std::size_t l = 0; l < device.layers(); ++l) {
    const std::size_t block =
        device.layout().layer(l).flat_numel / static_cast<std::size_t>(world().size());
    expected += 2 * (block + sizeof(float) * zero::quantized_blocks(block));
  }
  const zero::MemoryReport on_device = device.memory();
  EXPECT_EQ(std::string(on_device.optimizer_tier), DeviceMemory::name);
  EXPECT_EQ(on_device.optimizer_states.memory, expected);
  const zero::MemoryReport on_host = host_engine<zero::Stage<2>, zero::bfloat16>(run).memory();
  EXPECT_EQ(on_device.optimizer_states.memory, on_host.optimizer_states.memory);
  EXPECT_EQ(on_device.master_weights.memory, on_host.master_weights.memory);
}

// Split master weights in device memory: the residuals beside the moments, the compute copy the
// masters' high parts, both updated by the device's split step on the compute stream: the host
// engine's bits at every stage, with fp32 moments and 8-bit ones, in bfloat16 and float16.
TEST(DeviceEngine, SplitMastersGiveTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16>(s,
                              {.dtype = DType::bfloat16,
                               .accumulation = 2,
                               .clipping = 0.05,
                               .master = zero::MasterStorage::split_8bit},
                              "8-bit residuals, ");
  every_stage<zero::bfloat16>(s,
                              {.dtype = DType::bfloat16,
                               .eight_bit_moments = true,
                               .eight_bit_min_elements = 1000,
                               .master = zero::MasterStorage::split_16bit},
                              "16-bit residuals, 8-bit moments, ");
  const Scenario fp16{.dtype = DType::float16, .master = zero::MasterStorage::split_16bit};
  expect_device_engine_equals_host<zero::Stage<1>, zero::half>(s, fp16, "fp16 split, stage 1");
  expect_device_engine_equals_host<zero::Stage<3>, zero::half>(s, fp16, "fp16 split, stage 3");
  // An overflow skips the step on every rank: the weights and residuals stay as they were.
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16>(
      s,
      {.dtype = DType::bfloat16,
       .overflow_step = 1,
       .eight_bit_moments = true,
       .master = zero::MasterStorage::split_8bit},
      "split masters, an overflow at step 1, stage 2");
}

// The report counts the residuals where they are, in device memory: one byte (or two) an element
// of this rank's block of every layer, as the host engine counts them.
TEST(DeviceEngine, SplitMastersAreReportedInDeviceMemory) {
  StagedSetup s;
  for (const auto master : {zero::MasterStorage::split_8bit, zero::MasterStorage::split_16bit}) {
    const Scenario run{.dtype = DType::bfloat16, .master = master};
    DeviceEngine<zero::Stage<3>, zero::bfloat16> device(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
    const std::size_t bytes = master == zero::MasterStorage::split_8bit ? 1 : 2;
    std::size_t expected = 0;
    for (std::size_t l = 0; l < device.layers(); ++l)
      expected +=
          bytes * (device.layout().layer(l).flat_numel / static_cast<std::size_t>(world().size()));
    const zero::MemoryReport on_device = device.memory();
    EXPECT_EQ(std::string(on_device.optimizer_tier), DeviceMemory::name);
    EXPECT_EQ(on_device.master_weights.memory, expected) << zero::to_string(master);
    const zero::MemoryReport on_host = host_engine<zero::Stage<3>, zero::bfloat16>(run).memory();
    EXPECT_EQ(on_device.master_weights.memory, on_host.master_weights.memory);
  }
}

// A device engine's checkpoint is a host engine's: saved from device memory through host copies,
// loaded by a host engine into the same weights, and by a device engine of another stage, whose
// compute copy (written from the loaded master weights through a host copy) then trains on as the
// host engine does. With 8-bit moments in the larger layers (fp32 ones in the others) the codes
// and scales go through host copies both ways.
void expect_checkpoints_move_between_the_device_and_the_host(const Scenario& run) {
  StagedSetup s;
  SharedDir dir;
  DeviceEngine<zero::Stage<1>, zero::bfloat16> saved(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  set_weights(saved);
  Outcome ignored;
  device_steps<zero::bfloat16>(s, saved, run, 0, 2, ignored);
  saved.save_checkpoint(dir.path, "device");
  const Outcome at_save = finish(saved, {});

  auto host = host_engine<zero::Stage<1>, zero::bfloat16>(run);
  host.load_checkpoint(dir.path, "device");
  expect_same_weights(finish(host, {}), at_save, "loaded by the host engine");

  DeviceEngine<zero::Stage<3>, zero::bfloat16> loaded(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  loaded.load_checkpoint(dir.path, "device");
  expect_same_weights(finish(loaded, {}), at_save, "loaded by a stage 3 device engine");
  Outcome on_host, on_device;
  host_steps<zero::bfloat16>(host, run, 2, 1, on_host);
  device_steps<zero::bfloat16>(s, loaded, run, 2, 1, on_device);
#if ZERO_TEST_TWIN
  EXPECT_EQ(std::bit_cast<std::uint64_t>(on_device.norms[0]),
            std::bit_cast<std::uint64_t>(on_host.norms[0]));
#else
  EXPECT_NEAR(on_device.norms[0], on_host.norms[0], 1e-12 * on_host.norms[0]);
#endif
  expect_same_weights(finish(loaded, {}), finish(host, {}), "a step after loading");
}

TEST(DeviceEngine, CheckpointsMoveBetweenTheDeviceAndTheHost) {
  expect_checkpoints_move_between_the_device_and_the_host({.dtype = DType::bfloat16});
}

TEST(DeviceEngine, EightBitCheckpointsMoveBetweenTheDeviceAndTheHost) {
  expect_checkpoints_move_between_the_device_and_the_host(
      {.dtype = DType::bfloat16, .eight_bit_moments = true, .eight_bit_min_elements = 1000});
}

// Split masters: saved as the fp32 masters they reconstruct, read from the device's compute copy
// and residuals; loaded, split again into both.
TEST(DeviceEngine, SplitMasterCheckpointsMoveBetweenTheDeviceAndTheHost) {
  expect_checkpoints_move_between_the_device_and_the_host(
      {.dtype = DType::bfloat16, .master = zero::MasterStorage::split_8bit});
}

// A DeepSpeed config asking to offload the optimizer states is refused by an engine that keeps them
// in device memory, naming the key, rather than ignored.
TEST(DeviceEngine, RefusesAConfigsOffload) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  options.offload_optimizer = zero::config::OffloadDevice::cpu;
  try {
    DeviceEngine<zero::Stage<1>, zero::bfloat16> engine(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    ADD_FAILURE() << "the engine ignored offload_optimizer.device = cpu";
  } catch (const zero::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("offload_optimizer.device = \"cpu\", but this engine keeps "
                                   "them in device memory"),
        std::string::npos)
        << e.what();
  }
}

// LAMB over states in device memory does not compile (tests/engine/compile_fail), and a program
// taking its optimizer from a config is refused naming optimizer.type.
TEST(DeviceEngine, RefusesLambFromAConfig) {
  zero::config::OptimizerConfig lamb;
  lamb.type = zero::config::OptimizerType::lamb;
  try {
    zero::with_optimizer_on<OnTheDevice>(lamb, [](auto) { return 0; });
    ADD_FAILURE() << "LAMB over a device space was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.type Lamb: an optimizer with a trust ratio "
                                         "(LAMB) keeps its states in host memory"),
              std::string::npos)
        << e.what();
  }
}

// The two communicators must hold the same ranks in the same order: a device communicator whose
// ranks run backwards is refused on every rank, naming the mismatch, before any collective that
// could leave ranks waiting in different ones.
TEST(DeviceEngine, RefusesCommunicatorsOfDifferentRankOrders) {
  StagedSetup s;
  if (s.ranks < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  Staged backwards(zero::MpiCommunicator(world().boost_communicator()).split(0, -s.rank),
                   s.caller(), DeviceSpace(s.streams.transfer));
  try {
    DeviceEngine<zero::Stage<1>, zero::bfloat16> engine(
        world(), backwards, model(), adam(), zero::StaticLossScaler{},
        options_for({.dtype = DType::bfloat16}), s.compute());
    ADD_FAILURE() << "the engine took communicators of different rank orders";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("same ranks in the same order"), std::string::npos)
        << e.what();
  }
}

} // namespace device_engine_test
