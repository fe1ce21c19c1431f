// Kept inputs on the NVMe tier (residual/kept_inputs_on_nvme.hpp): the same gradients as kept in
// memory, bit for bit, dropout included; every kept input crosses the disk once each way per step;
// host memory holds four buffers whatever the number of checkpoints. (The tier's checksums and I/O
// errors are tested with the NVMe tier itself, tests/offload.)

#include "toy_layers.hpp"

#include "zero/residual/checkpointed_layers.hpp"
#include "zero/residual/kept_inputs_on_nvme.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using zero::View;
using zero::testing::GeneratorState;
using zero::testing::ramp;
using zero::testing::ToyLayers;

struct Result {
  std::vector<std::vector<float>> weight_gradients;
  std::vector<float> input_gradient;
  std::size_t peak_bytes = 0;
};

// Three steps of the toy loop (with dropout) with `checkpoints`, the inputs kept on `tier`.
Result run(std::size_t checkpoints, zero::KeptInputTier* tier, bool synchronize = false) {
  ToyLayers toy;
  toy.count = 9;
  std::mt19937 generator(11);
  toy.generator = &generator;
  std::vector<std::vector<float>> weights;
  for (std::size_t l = 0; l < toy.count; ++l)
    weights.push_back(ramp(toy.width * toy.width, 0.3f, float(l)));
  Result r;
  r.weight_gradients.resize(toy.count);
  toy.weights = [&](std::size_t l) { return weights[l].data(); };
  toy.gradients = [&](std::size_t l, const std::vector<float>& dw) { r.weight_gradients[l] = dw; };
  zero::CheckpointedLayers<ToyLayers, GeneratorState> loop(
      toy,
      {.number_checkpoints = checkpoints, .kept_inputs = tier, .synchronize_boundary = synchronize},
      GeneratorState{&generator});
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = ramp(toy.activation_elements(), 1.0f, float(step));
    const View<const float> y = loop.forward(x);
    r.input_gradient.assign(x.size(), 0.0f);
    loop.backward(ramp(y.size(), 0.5f, 2.0f), r.input_gradient);
  }
  r.peak_bytes = loop.stats().peak_activation_bytes;
  return r;
}

std::filesystem::path fresh_directory(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zero_kept_inputs_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(KeptInputsOnNvme, SameGradientsAsInMemory) {
  const auto dir = fresh_directory("same");
  for (std::size_t k : {2, 3, 9})
    for (bool synchronize : {false, true}) {
      zero::KeptInputsOnNvme tier({.path = dir, .owner = "activations"}, 0);
      const Result on_disk = run(k, &tier, synchronize);
      const Result in_memory = run(k, nullptr);
      EXPECT_EQ(on_disk.weight_gradients, in_memory.weight_gradients) << k << " checkpoints";
      EXPECT_EQ(on_disk.input_gradient, in_memory.input_gradient) << k << " checkpoints";
      // Every segment's input but the last one's, written once and read once per step.
      const std::size_t slot = 4096; // 3 x 12 floats, one O_DIRECT unit
      EXPECT_EQ(tier.bytes_written(), 3 * (k - 1) * slot) << k << " checkpoints";
      EXPECT_EQ(tier.bytes_read(), 3 * (k - 1) * slot) << k << " checkpoints";
      EXPECT_EQ(tier.buffer_bytes(), 4 * slot);
      if (k == 9) { // one layer per segment: memory holds 4 inputs besides one layer, not 9
        EXPECT_LT(on_disk.peak_bytes, in_memory.peak_bytes);
      }
    }
  std::filesystem::remove_all(dir);
}

TEST(KeptInputsOnNvme, OneSegmentKeepsNothingThere) {
  const auto dir = fresh_directory("off");
  zero::KeptInputsOnNvme tier({.path = dir}, 0);
  EXPECT_EQ(run(0, &tier).weight_gradients, run(0, nullptr).weight_gradients);
  EXPECT_EQ(tier.bytes_written(), 0u);
  std::filesystem::remove_all(dir);
}

} // namespace
