// Quantized gradients (ZeRO++'s qgZ, EngineOptions::quantized_gradients): with the ranks on the
// hierarchical transport (every rank a simulated node at 2 and 3 ranks, 2 x 2 under
// ZERO_NODE_SIZE=2), training stays within the bound of the exact run and is not the exact run,
// stages 1-3 get the same bits, the reduce-scatters move the packed bytes, an overflow on one rank
// still skips the step on all; on one node the run is the exact one; stage 0 refuses it.

#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace quantized_gradients_test {

using namespace zero::testing;

zero::EngineOptions quantized(int bits = 4) {
  zero::EngineOptions options;
  options.quantized_gradients = true;
  options.gradient_quantization_bits = bits;
  options.quantization_block = 64;
  return options;
}

zero::MpiCommunicator* across_nodes() {
  return &zero::testing::communicator<SimulatedNodesCommunicator>();
}

template <class Plan>
Outcome sgd(const Scenario& run, zero::EngineOptions options, zero::MpiCommunicator* comm) {
  return train<Plan, zero::host, zero::SGD>(run, zero::StaticLossScaler{}, options, comm);
}

// The largest difference between two runs' weights.
float largest_difference(const Outcome& a, const Outcome& b) {
  float largest = 0;
  for (std::size_t l = 0; l < a.weights.size(); ++l)
    for (std::size_t i = 0; i < a.weights[l].size(); ++i)
      largest = std::max(largest, std::fabs(a.weights[l][i] - b.weights[l][i]));
  return largest;
}

TEST(QuantizedGradients, SgdStaysWithinTheBoundOfTheExactRun) {
  const Scenario run{.steps = 4};
  const Outcome exact = sgd<zero::Stage<2>>(run, {}, across_nodes());
  for (const int bits : {4, 8}) {
    const Outcome q = sgd<zero::Stage<2>>(run, quantized(bits), across_nodes());
    // SGD moves each weight by lr times its gradient; the scenario's gradients lie within 0.65,
    // so an averaged gradient is off by at most about (2 + 1/2L) * 0.65 / 2L (docs/multinode.md),
    // and each of the 4 steps adds lr = 0.01 times that.
    const float levels = bits == 4 ? 7.0f : 127.0f;
    const float bound = 4 * 0.01f * (2 + 0.5f / levels) * 0.65f / (2 * levels);
    const float difference = largest_difference(exact, q);
    EXPECT_LE(difference, bound) << bits << " bits";
    if (zero::testing::world().size() > 1) {
      EXPECT_GT(difference, bound / 100) << bits << " bits: the gradients were not quantized";
    }
  }
}

TEST(QuantizedGradients, StagesOneToThreeGetTheSameBits) {
  const Scenario runs[] = {{}, {.dtype = zero::DType::bfloat16, .bucket = 7, .steps = 3}};
  for (const Scenario& run : runs) {
    const Outcome one =
        train<zero::Stage<1>>(run, zero::StaticLossScaler{}, quantized(), across_nodes());
    expect_same_weights(
        one, train<zero::Stage<2>>(run, zero::StaticLossScaler{}, quantized(), across_nodes()),
        true, "stage 2");
    expect_same_weights(
        one, train<zero::Stage<3>>(run, zero::StaticLossScaler{}, quantized(), across_nodes()),
        true, "stage 3");
  }
}

TEST(QuantizedGradients, ReduceScattersMoveThePackedBytes) {
  const Scenario run{.bucket = 1000, .steps = 2};
  const Outcome exact = train<zero::Stage<2>>(run, zero::StaticLossScaler{}, {}, across_nodes());
  const Outcome q =
      train<zero::Stage<2>>(run, zero::StaticLossScaler{}, quantized(), across_nodes());
  const auto& plain = exact.steps.back().communication[zero::Collective::reduce_scatter];
  const auto& packed = q.steps.back().communication[zero::Collective::reduce_scatter];
  EXPECT_EQ(packed.elements, plain.elements);
  EXPECT_EQ(packed.calls, plain.calls);
  // Half a byte a value and a float scale per 64 values, against 4 bytes: 0.14 of the bytes.
  EXPECT_LT(double(packed.bytes), 0.15 * double(plain.bytes));
  EXPECT_GT(double(packed.bytes), 0.125 * double(plain.bytes));
}

TEST(QuantizedGradients, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const Scenario run{.dtype = zero::DType::float16, .steps = 3, .scale = 1024, .infinity_step = 1};
  zero::DynamicLossScaler scaler(zero::DynamicLossScalerOptions{.init_scale = 1024});
  const Outcome q = train<zero::Stage<2>, zero::host, zero::Adam, zero::DynamicLossScaler>(
      run, scaler, quantized(), across_nodes());
  ASSERT_EQ(q.steps.size(), 3u);
  EXPECT_TRUE(q.steps[0].applied);
  EXPECT_FALSE(q.steps[1].applied) << "the infinity was lost in quantization";
  EXPECT_TRUE(q.steps[2].applied);
  for (const auto& layer : q.weights)
    for (float w : layer)
      ASSERT_TRUE(std::isfinite(w));
}

TEST(QuantizedGradients, OnOneNodeTheRunIsTheExactOne) {
  if (zero::testing::world().nodes() != 1)
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks span several nodes";
  const Scenario run{};
  expect_same_weights(train<zero::Stage<2>>(run),
                      train<zero::Stage<2>>(run, zero::StaticLossScaler{}, quantized()), true,
                      "qgZ on one node");
}

TEST(QuantizedGradients, StageZeroRefusesIt) {
  zero::Adam adam(zero::AdamOptions{});
  using Stage0 = zero::Engine<zero::Stage<0>, zero::MpiCommunicator, zero::host, zero::Adam,
                              zero::StaticLossScaler>;
  expect_error_contains(
      [&] {
        Stage0 engine(zero::testing::world(), model(), adam, zero::StaticLossScaler{}, quantized());
      },
      "quantized_gradients (zero_quantized_gradients, ZeRO++'s qgZ) quantizes the gradients' "
      "reduce-scatter, and stage 0 all-reduces them");
  zero::EngineOptions bad = quantized(3);
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                     zero::StaticLossScaler>
            engine(zero::testing::world(), model(), adam, zero::StaticLossScaler{}, bad);
      },
      "gradient_quantization_bits must be 4 or 8, not 3");
}

} // namespace quantized_gradients_test
