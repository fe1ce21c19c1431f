// Stage 3 with quantized weight gathers (ZeRO++'s qwZ, EngineOptions::quantized_weights): every
// rank computes with the same dequantized weights, within the documented bound of the exact ones;
// the gathers move int8 blocks and their scales, exactly the bytes the packed form says; training
// stays close to the unquantized run; plans that gather nothing refuse the option.

#include "training_scenario.hpp"

#include <zero/core/block_quantization.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace {

using namespace zero::testing;

template <class Plan>
using AdamEngine =
    zero::Engine<Plan, zero::MpiCommunicator, zero::host, zero::Adam, zero::StaticLossScaler>;

zero::EngineOptions quantized(std::size_t block) {
  zero::EngineOptions options;
  options.quantized_weights = true;
  options.quantization_block = block;
  return options;
}

TEST(QuantizedWeights, EveryRankComputesWithTheSameWeightsWithinTheBound) {
  auto& world = zero::testing::world();
  zero::Adam adam(zero::AdamOptions{});
  AdamEngine<zero::Stage<3>> engine(world, model(), adam, zero::StaticLossScaler{}, quantized(16));
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> init(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < init.size(); ++i)
      init[i] = initial_value(l, i);
    engine.set_layer(l, init);
  }
  std::size_t rounded = 0;
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    auto weights = engine.acquire(l);
    const auto values = weights.values<float>();
    std::vector<float> lowest(values.begin(), values.end()), highest = lowest;
    float amax = 0;
    for (std::size_t i = 0; i < values.size(); ++i)
      amax = std::max(amax, std::fabs(initial_value(l, i)));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float exact = initial_value(l, i);
      // No block's largest value exceeds the layer's.
      ASSERT_LE(std::fabs(values[i] - exact), zero::BlockQuantization{}.error_bound(amax) * 1.0001f)
          << "layer " << l << " value " << i;
      rounded += values[i] != exact;
    }
    world.all_reduce(lowest, zero::ReduceOp::min).wait();
    world.all_reduce(highest, zero::ReduceOp::max).wait();
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(lowest[i], highest[i]) << "layer " << l << " value " << i << " differs by rank";
  }
  EXPECT_GT(rounded, 100u) << "the weights were gathered unquantized";
  // The exact weights are still the ones the optimizer holds.
  EXPECT_EQ(engine.get_layer(2)[7], initial_value(2, 7));
}

TEST(QuantizedWeights, GathersMoveTheInt8BlocksAndTheirScales) {
  const Scenario run{.steps = 2};
  const std::size_t block = 64;
  const Outcome plain = train<zero::Stage<3>>(run);
  const Outcome packed = train<zero::Stage<3>>(run, zero::StaticLossScaler{}, quantized(block));
  // What the packed form says: each rank's block of a layer in ceil(n / block) scales and n bytes;
  // forward gathers every layer, backward all but the last (still gathered from forward).
  auto& world = zero::testing::world();
  zero::Adam adam(zero::AdamOptions{});
  AdamEngine<zero::Stage<3>> layout_of(world, model(), adam, zero::StaticLossScaler{});
  const zero::BlockQuantization q{block};
  std::uint64_t expected = 0;
  for (std::size_t l = 0; l < layout_of.layers(); ++l)
    for (int r = 0; r < world.size(); ++r) {
      const std::size_t bytes = q.packed_bytes(layout_of.layout().block(l, r).size());
      expected += (l + 1 < layout_of.layers() ? 2 : 1) * bytes;
    }
  const auto& gathered = packed.steps[1].communication[zero::Collective::all_gather];
  EXPECT_EQ(gathered.bytes, expected);
  const auto& full = plain.steps[1].communication[zero::Collective::all_gather];
  EXPECT_LT(double(gathered.bytes), 0.3 * double(full.bytes));
  // Gradients are reduced as before.
  EXPECT_EQ(packed.steps[1].communication[zero::Collective::reduce_scatter].bytes,
            plain.steps[1].communication[zero::Collective::reduce_scatter].bytes);
}

TEST(QuantizedWeights, TrainingStaysCloseToTheUnquantizedRun) {
  // SGD moves each weight by lr times its gradient, 0.3 w + noise: a weight off by e gives an
  // update off by 0.003 e, so after 4 steps the weights differ by far less than the bound itself.
  const Scenario run{};
  const Outcome exact = train<zero::Stage<0>, zero::host, zero::SGD>(run);
  for (const std::size_t block : {1u, 32u, 256u}) {
    const Outcome approx = train<zero::Stage<3>, zero::host, zero::SGD>(
        run, zero::StaticLossScaler{}, quantized(block));
    std::size_t differ = 0;
    for (std::size_t l = 0; l < exact.weights.size(); ++l)
      for (std::size_t i = 0; i < exact.weights[l].size(); ++i) {
        const float x = exact.weights[l][i], y = approx.weights[l][i];
        ASSERT_NEAR(x, y, 1e-4f) << "block " << block << " layer " << l << " value " << i;
        differ += x != y;
      }
    if (block > 1) {
      EXPECT_GT(differ, 0u) << "block " << block << ": quantization had no effect";
    }
  }
}

TEST(QuantizedWeights, HalfPrecisionAndUnequalBlocksToo) {
  // bf16 weights, and a partitioner that gives ranks blocks of different sizes (per-rank counts).
  const Scenario run{.dtype = zero::DType::bfloat16, .deterministic = false, .steps = 3};
  using Greedy =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::WholeParameterGreedy>>;
  const Outcome exact = train<zero::Stage<0>, zero::host, zero::SGD>(run);
  const Outcome approx =
      train<Greedy, zero::host, zero::SGD>(run, zero::StaticLossScaler{}, quantized(8));
  for (std::size_t l = 0; l < exact.weights.size(); ++l)
    for (std::size_t i = 0; i < exact.weights[l].size(); ++i)
      ASSERT_NEAR(exact.weights[l][i], approx.weights[l][i], 1e-2f) << l << " " << i;
}

TEST(QuantizedWeights, PlansThatKeepWholeParametersRefuseIt) {
  auto& world = zero::testing::world();
  zero::Adam adam(zero::AdamOptions{});
  expect_error_contains(
      [&] {
        AdamEngine<zero::Stage<2>> engine(world, model(), adam, zero::StaticLossScaler{},
                                          quantized(256));
      },
      "quantized_weights (zero_quantized_weights, ZeRO++'s qwZ) quantizes stage 3's parameter "
      "gathers");
}

} // namespace
