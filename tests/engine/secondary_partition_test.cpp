// Stage 3 with a secondary weight partition (ZeRO++'s hpZ, EngineOptions::hpz_partition_size):
// backward's gathers stay within groups of consecutive ranks, the weights stay bitwise those of
// stage 0 (and, with int8 gathers, those of the int8 run without hpZ), and what cannot work is
// refused by name.

#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/shard/per_parameter.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace {

using namespace zero::testing;

zero::EngineOptions secondary(int ranks, bool quantized = false) {
  zero::EngineOptions options;
  options.hpz_partition_size = ranks;
  options.quantized_weights = quantized;
  return options;
}

// Group sizes that divide the world: every one above 1.
std::vector<int> group_sizes() {
  std::vector<int> sizes;
  const int n = zero::testing::world().size();
  for (int g = 2; g <= n; ++g)
    if (n % g == 0) sizes.push_back(g);
  return sizes;
}

// Per-parameter chunks: each layer's flat image is in another order than its parameters, and the
// piece a rank keeps is cut from the image (a layer acquired again while still gathered, the last
// of forward and the first of backward, must not cut it from the parameters in order).
using PerParameterStage3 =
    zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients, zero::shard_parameters,
                       zero::partition_with<zero::PerParameter>>;

TEST(SecondaryPartition, StageThreeWithGroupsIsBitwiseStageZero) {
  if (group_sizes().empty()) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const Scenario runs[] = {{},
                           {.dtype = zero::DType::bfloat16, .bucket = 7, .steps = 3},
                           {.accumulation = 2, .persistence = 100}};
  for (const Scenario& run : runs) {
    const Outcome reference = train<zero::Stage<0>>(run);
    for (int g : group_sizes()) {
      expect_same_weights(reference,
                          train<zero::Stage<3>>(run, zero::StaticLossScaler{}, secondary(g)), true,
                          "hpz " + std::to_string(g));
      expect_same_weights(reference,
                          train<PerParameterStage3>(run, zero::StaticLossScaler{}, secondary(g)),
                          true, "per-parameter chunks, hpz " + std::to_string(g));
    }
  }
}

TEST(SecondaryPartition, BackwardGathersStayInTheGroup) {
  if (group_sizes().empty()) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const Scenario run{.steps = 2};
  for (int g : group_sizes()) {
    const Outcome o = train<zero::Stage<3>>(run, zero::StaticLossScaler{}, secondary(g));
    const auto& all = o.steps[1].communication[zero::Collective::all_gather];
    const auto& within = o.steps[1].within_hpz_groups[zero::Collective::all_gather];
    // Forward gathers each layer once across the shard group; backward gathers every layer but
    // the last (still gathered from forward) within the group, pieces padded to the group size.
    EXPECT_EQ(all.elements - within.elements, o.padded) << "hpz " << g;
    EXPECT_GE(within.elements, o.padded - o.last_layer_padded) << "hpz " << g;
    EXPECT_LT(within.elements, o.padded - o.last_layer_padded + 5 * std::size_t(g)) << "hpz " << g;
    EXPECT_EQ(all.calls - within.calls, 5u) << "hpz " << g;
    EXPECT_EQ(within.calls, 4u) << "hpz " << g;
  }
}

TEST(SecondaryPartition, WithInt8GathersTheWeightsAreThoseOfInt8Alone) {
  if (group_sizes().empty()) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const Scenario run{};
  const Outcome int8 = train<zero::Stage<3>>(run, zero::StaticLossScaler{}, secondary(1, true));
  for (int g : group_sizes())
    expect_same_weights(int8,
                        train<zero::Stage<3>>(run, zero::StaticLossScaler{}, secondary(g, true)),
                        true, "int8, hpz " + std::to_string(g));
}

TEST(SecondaryPartition, WhatCannotWorkIsRefused) {
  auto& world = zero::testing::world();
  zero::Adam adam(zero::AdamOptions{});
  using Stage2 = zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                              zero::StaticLossScaler>;
  using Stage3 = zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::Adam,
                              zero::StaticLossScaler>;
  if (world.size() > 1)
    expect_error_contains(
        [&] {
          Stage2 engine(world, model(), adam, zero::StaticLossScaler{}, secondary(world.size()));
        },
        "hpz_partition_size (zero_hpz_partition_size, ZeRO++'s hpZ) cuts stage 3's weights");
  expect_error_contains(
      [&] {
        Stage3 engine(world, model(), adam, zero::StaticLossScaler{}, secondary(world.size() + 1));
      },
      "hpz_partition_size (zero_hpz_partition_size) " + std::to_string(world.size() + 1) +
          " does not divide the shard group of " + std::to_string(world.size()) + " ranks");
}

} // namespace
