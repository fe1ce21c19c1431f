// train_gpt's device loop (device_training.hpp) over the CPU twin of a device (DeviceTwinSpace:
// the engine's stores, the model's activations and its kernels in device_twin memory, the ranks'
// collectives through StagedCommunicator) against the host loop (training.hpp's train(), the
// prebuilt host engine): ZeRO-3 with AdamW, fp32 and bf16, two micro-steps, with and without
// activation checkpointing, and with the parameter shards and optimizer states offloaded to host
// memory beside activation checkpointing (ZeRO-Infinity's offload_param), the same losses every
// step and the same final weights, bit for bit. Run at 1-3 ranks.

#include "comm_test.hpp"

#include "device_training.hpp"
#include "training.hpp"
#include "weights.hpp"

#include "../common/optimizer_config.hpp"

#include <zero/comm/staged_communicator.hpp>
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/engine/engine.hpp> // the twin's engine is not a prebuilt one
#include <zero/engines.hpp>
#include <zero/offload/offloaded_optimizer_store.hpp>
#include <zero/offload/offloaded_parameters.hpp>
#include <zero/optim/from_config.hpp>
#include <zero/precision/any_loss_scaler.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace {

using zero::testing::world;
using Twin = zero::DeviceTwinSpace;
using Staged = zero::StagedCommunicator<Twin, zero::MpiCommunicator>;
using OnTheTwin = zero::Placement<zero::execute_on<Twin>>;
// ZeRO-Infinity's offload_param: the parameter shards and the optimizer states in pinned host
// memory, each block copied to the device when its layer is gathered (in a recomputation too).
using ParametersOffloaded =
    zero::Placement<zero::execute_on<Twin>, zero::parameters_in<zero::pinned_host>,
                    zero::optimizer_states_in<zero::pinned_host>>;

train_gpt::Flags flags(zero::DType dtype) {
  train_gpt::Flags f;
  // Sizes that leave partial lanes, strips and tiles; a batch every rank count divides.
  f.model = gpt::Config{.layers = 2, .heads = 2, .embd = 24, .seq = 9, .vocab = 256};
  f.batch = 12;
  f.steps = 3;
  f.stage = 3;
  f.dtype = dtype;
  f.optimizer = "adamw";
  f.lr = 3e-3;
  f.weight_decay = 0.01;
  f.save_npy = "unused"; // asks train() for the final weights
  return f;
}

zero::EngineOptions options(const train_gpt::Flags& f) {
  zero::EngineOptions o;
  o.compute_dtype = f.dtype;
  o.gradient_accumulation_steps = 2;
  o.persistence_threshold = 0; // every layer sharded and gathered
  return o;
}

template <class Engine>
void set_initial_weights(Engine& engine, const train_gpt::Flags& f) {
  const std::vector<std::vector<float>> layers =
      train_gpt::layers_of(f.model, train_gpt::InitialWeights::random(f.model, f.seed), 0);
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, layers[l]);
}

train_gpt::History on_the_host(const train_gpt::Flags& f, const train_gpt::Tokens& data) {
  train_gpt::Ranks ranks(world(), 1);
  return zero::with_optimizer<zero::AdamW>(examples::optimizer_config(f), [&](auto optimizer) {
    zero::PrebuiltEngine<3, zero::AdamW> engine(
        ranks.groups, gpt::specs(f.model), std::move(optimizer),
        zero::AnyLossScaler::for_run(f.dtype, nullptr), options(f));
    set_initial_weights(engine, f);
    return train_gpt::train(ranks, f, engine, data);
  });
}

template <class Where = OnTheTwin>
train_gpt::History on_the_twin(const train_gpt::Flags& f, const train_gpt::Tokens& data) {
  zero::HostStream caller("caller"), transfer("transfer"), compute("compute");
  Staged comm(zero::MpiCommunicator(world().boost_communicator()), Twin(caller), Twin(transfer));
  return zero::with_optimizer<zero::AdamW>(examples::optimizer_config(f), [&](auto optimizer) {
    zero::Engine<zero::Stage<3>, Staged, Where, zero::AdamW, zero::AnyLossScaler> engine(
        world(), comm, gpt::specs(f.model), std::move(optimizer),
        zero::AnyLossScaler::for_run(f.dtype, nullptr), options(f), Twin(compute));
    set_initial_weights(engine, f);
    return train_gpt::train_on_device(world(), f, engine, data, Twin(compute));
  });
}

void expect_same_bits(const std::vector<float>& twin, const std::vector<float>& host,
                      const std::string& what) {
  ASSERT_EQ(twin.size(), host.size()) << what;
  for (std::size_t i = 0; i < twin.size(); ++i)
    if (std::bit_cast<std::uint32_t>(twin[i]) != std::bit_cast<std::uint32_t>(host[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << twin[i] << " on the twin and "
                    << host[i] << " on the host";
      return;
    }
}

template <class Where = OnTheTwin>
void expect_twin_equals_host(zero::DType dtype, std::size_t checkpoints = 0,
                             bool kept_inputs_cpu = false) {
  train_gpt::Flags f = flags(dtype);
  if (checkpoints > 0) f.checkpoints = checkpoints;
  train_gpt::Flags on_device = f;
  on_device.kept_inputs_cpu = kept_inputs_cpu; // the host loop's are in host memory already
  const train_gpt::Tokens data = train_gpt::Tokens::from_file(ZERO_TEST_GPT_DATA, f.model.seq);
  const train_gpt::History host = on_the_host(f, data);
  const train_gpt::History twin = on_the_twin<Where>(on_device, data);
  const std::string run = zero::to_string(dtype) +
                          (checkpoints ? ", " + std::to_string(checkpoints) + " checkpoints" : "") +
                          (kept_inputs_cpu ? ", kept in host memory" : "");
  // Both loops ran every block but the last segment's forward again in backward.
  const std::size_t recomputed = checkpoints ? f.model.layers - f.model.layers / checkpoints : 0;
  EXPECT_EQ(twin.activations.recomputed_layers, recomputed) << run;
  EXPECT_EQ(host.activations.recomputed_layers, recomputed) << run;
  const std::size_t kept = checkpoints ? host.activations.kept_input_bytes : 0;
  EXPECT_EQ(twin.activations.kept_input_host_bytes, kept_inputs_cpu ? kept : 0) << run;
  EXPECT_EQ(twin.activations.kept_input_bytes, kept_inputs_cpu ? 0 : kept) << run;
  ASSERT_EQ(twin.loss.size(), host.loss.size());
  for (std::size_t s = 0; s < host.loss.size(); ++s)
    EXPECT_EQ(std::bit_cast<std::uint64_t>(twin.loss[s]),
              std::bit_cast<std::uint64_t>(host.loss[s]))
        << run << " step " << s << ": loss " << twin.loss[s] << " on the twin, " << host.loss[s]
        << " on the host";
  EXPECT_LT(host.loss.back(), host.loss.front()) << run << ": the run learns";
  ASSERT_EQ(twin.final_weights.size(), host.final_weights.size());
  const std::vector<gpt::TensorSpec> tensors = gpt::tensor_specs(f.model);
  for (std::size_t t = 0; t < tensors.size(); ++t)
    expect_same_bits(twin.final_weights[t], host.final_weights[t], run + " " + tensors[t].name);
}

TEST(DeviceTraining, Fp32TwinGivesTheHostRunsBits) {
  expect_twin_equals_host(zero::DType::float32);
}

TEST(DeviceTraining, Bf16TwinGivesTheHostRunsBits) {
  expect_twin_equals_host(zero::DType::bfloat16);
}

// Activation checkpointing in the device's memory: each block's forward runs again from its kept
// input in backward, as the host loop's does, and changes no bit.
TEST(DeviceTraining, CheckpointedTwinGivesTheHostRunsBits) {
  expect_twin_equals_host(zero::DType::bfloat16, 2);
  // ZeRO-R's CPU checkpointing: the kept inputs to pinned host memory and back.
  expect_twin_equals_host(zero::DType::bfloat16, 2, /*kept_inputs_cpu=*/true);
}

// offload_param beside activation checkpointing: a recomputed block acquires its layer again, so
// its block is copied from host memory and gathered a second time in backward; the host's step
// writes the new blocks. Changes no bit either.
TEST(DeviceTraining, CheckpointedOffloadParamTwinGivesTheHostRunsBits) {
  expect_twin_equals_host<ParametersOffloaded>(zero::DType::bfloat16, 2);
}

// bf16 products (the default on a GPU with --dtype bf16): the twin rounds the products' operands
// as a GPU does, so its run leaves the host run's bits (whose products are fp32) but stays near
// them.
TEST(DeviceTraining, Bf16ProductsTwinStaysNearTheHostRun) {
  const train_gpt::Flags f = flags(zero::DType::bfloat16);
  train_gpt::Flags on_device = f;
  on_device.products = gpt::ProductPrecision::bf16;
  const train_gpt::Tokens data = train_gpt::Tokens::from_file(ZERO_TEST_GPT_DATA, f.model.seq);
  const train_gpt::History host = on_the_host(f, data);
  const train_gpt::History twin = on_the_twin(on_device, data);
  ASSERT_EQ(twin.loss.size(), host.loss.size());
  std::size_t different = 0;
  double largest = 0;
  for (std::size_t s = 0; s < host.loss.size(); ++s) {
    const double gap = std::abs(twin.loss[s] - host.loss[s]) / host.loss[s];
    largest = std::max(largest, gap);
    EXPECT_LT(gap, 1e-3) << "step " << s << ": loss " << twin.loss[s] << " with bf16 products, "
                         << host.loss[s] << " with fp32";
    different += twin.loss[s] != host.loss[s];
  }
  if (world().rank() == 0)
    std::cout << "bf16 products against fp32: the losses' largest relative gap " << largest << "\n";
  EXPECT_GT(different, 0u) << "the products were not rounded";
  EXPECT_LT(twin.loss.back(), twin.loss.front()) << "the run learns";
}

} // namespace
