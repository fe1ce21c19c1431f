// 8-bit moments (EngineOptions::moments = blockwise_8bit): every stage gets the bits of stage 0
// (the blocks of 2048 are the layer's own whatever the ranks), the run stays near the fp32-moment
// run without being it, the report counts codes and scales, and what cannot keep them refuses by
// name.

#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/optim/quantized_moments.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/shard/per_parameter.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace blockwise_moments_test {

using namespace zero::testing;

// Layers 2 (1360 elements), 4 (2064) and 5 (3 blocks and a part) keep 8-bit moments; layers 0, 1
// and 3 (96, 6 and 12 elements) fp32 ones.
constexpr std::size_t min_elements = 1000;
constexpr std::size_t wide = 3 * zero::quantized_moment_block + 500;
// Buckets of about a thousand elements: several per wide layer, not hundreds (each is a collective,
// and the two-node run pays a network round trip for each).
constexpr std::size_t bucket = 1000;

zero::EngineOptions eight_bit() {
  zero::EngineOptions options;
  options.moments = zero::MomentStorage::blockwise_8bit;
  options.eight_bit_min_elements = min_elements;
  return options;
}

template <class Plan>
Outcome run(const Scenario& scenario, zero::EngineOptions options = eight_bit()) {
  return train<Plan>(scenario, zero::StaticLossScaler{}, options);
}

TEST(BlockwiseMoments, EveryStageGetsTheBitsOfStageZero) {
  const Scenario runs[] = {
      {.bucket = bucket, .wide_layer = wide},
      {.dtype = zero::DType::bfloat16, .bucket = bucket - 7, .steps = 3, .wide_layer = wide}};
  for (const Scenario& scenario : runs) {
    const Outcome zero_stage = run<zero::Stage<0>>(scenario);
    expect_same_weights(zero_stage, run<zero::Stage<1>>(scenario), true, "stage 1");
    expect_same_weights(zero_stage, run<zero::Stage<2>>(scenario), true, "stage 2");
    expect_same_weights(zero_stage, run<zero::Stage<3>>(scenario), true, "stage 3");
  }
}

// Adam's step is about lr * m / sqrt(v) per element whatever the moments' scale: quantized
// moments move each weight by at most a few lr over the run, and by something.
TEST(BlockwiseMoments, StaysNearTheFp32MomentRunWithoutBeingIt) {
  const Scenario scenario{.bucket = bucket, .steps = 6, .wide_layer = wide};
  const Outcome fp32 = run<zero::Stage<2>>(scenario, {});
  const Outcome q = run<zero::Stage<2>>(scenario);
  float largest = 0;
  for (std::size_t l = 0; l < fp32.weights.size(); ++l) {
    float in_layer = 0;
    for (std::size_t i = 0; i < fp32.weights[l].size(); ++i)
      in_layer = std::max(in_layer, std::fabs(fp32.weights[l][i] - q.weights[l][i]));
    if (fp32.weights[l].size() < min_elements) {
      EXPECT_EQ(in_layer, 0.0f) << "layer " << l << " keeps fp32 moments";
    }
    largest = std::max(largest, in_layer);
  }
  EXPECT_GT(largest, 1e-6f) << "the moments were not quantized";
  EXPECT_LT(largest, 6 * 0.01f * 0.5f) << "more than half a step per step away";
}

// The report: codes and scales for the 8-bit layers, 8 bytes an element for the others, over
// this rank's blocks (every rank's block a multiple of 2048 elements).
TEST(BlockwiseMoments, TheReportCountsCodesAndScales) {
  const std::size_t ranks = std::size_t(world().size());
  const Scenario scenario{.bucket = bucket, .steps = 1, .wide_layer = wide};
  const Outcome sharded = run<zero::Stage<1>>(scenario);
  std::size_t expected = 0;
  for (std::size_t l = 0; l < sharded.flat_sizes.size(); ++l) {
    const std::size_t flat = sharded.flat_sizes[l];
    EXPECT_EQ(flat % (zero::quantized_moment_block * ranks), 0u) << "layer " << l;
    const std::size_t block = flat / ranks;
    expected += sharded.weights[l].size() >= min_elements
                    ? 2 * (block + sizeof(float) * zero::quantized_blocks(block))
                    : 2 * sizeof(float) * block;
  }
  EXPECT_EQ(sharded.memory.optimizer_states.memory, expected);
  EXPECT_EQ(sharded.memory.master_weights.memory, sizeof(float) * sharded.padded / ranks);

  // Stage 0 keeps each layer's flat buffer whole, padding included: the same blocks.
  const Outcome whole = run<zero::Stage<0>>(scenario);
  std::size_t whole_expected = 0;
  for (std::size_t l = 0; l < whole.flat_sizes.size(); ++l) {
    const std::size_t n = whole.flat_sizes[l];
    whole_expected += whole.weights[l].size() >= min_elements
                          ? 2 * (n + sizeof(float) * zero::quantized_blocks(n))
                          : 2 * sizeof(float) * n;
  }
  EXPECT_EQ(whole.memory.optimizer_states.memory, whole_expected);

  // The wide layer marked fp32_moments (an embedding, say) keeps 8 bytes an element.
  const Outcome marked =
      run<zero::Stage<0>>({.steps = 1, .wide_layer = wide, .fp32_moment_layer = 5});
  const std::size_t n = whole.flat_sizes[5];
  EXPECT_EQ(marked.memory.optimizer_states.memory,
            whole_expected - 2 * (n + sizeof(float) * zero::quantized_blocks(n)) +
                2 * sizeof(float) * n);
}

// (Engines other tests of this binary compile too: SGD's at stage 3, per_parameter's stage 3.)
TEST(BlockwiseMoments, WhatCannotKeepThemRefusesByName) {
  const Scenario scenario{.steps = 1};
  expect_error_contains(
      [&] {
        train<zero::Stage<3>, zero::host, zero::SGD>(scenario, zero::StaticLossScaler{},
                                                     eight_bit());
      },
      "8-bit moments (EngineOptions::moments) are built for Adam and AdamW");
  using PerParameter3 =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::PerParameter>>;
  expect_error_contains([&] { run<PerParameter3>(scenario); },
                        "8-bit moments (EngineOptions::moments) need the flat_contiguous");
}

} // namespace blockwise_moments_test
