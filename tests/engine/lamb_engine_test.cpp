// LAMB through the engine, at 1, 2 and 3 ranks. Its trust ratio is per parameter while stages
// 1-3 cut parameters across ranks, so each rank sums its pieces and the sums are combined over the
// shard group (engine/optimizer_store.hpp). Promises:
// - stages 0-3 give the same weights bit for bit (stage 0 sums the pieces as their owners would),
//   with clipping, accumulation, half precision and other partitioners too;
// - the weights are those of zero::Lamb run on each whole parameter, with the rank-averaged
//   gradient, on one rank (to 1e-5: pieces and averaging order change the last bits).
// The engines scale the loss by a static 1 chosen at run time (AnyLossScaler), so that those of
// Stage<S> are the prebuilt zero::PrebuiltEngine<S, Lamb>, linked from zero::engines where it is
// built; the other partitioners' engines are compiled here, from <zero/engine/engine.hpp>.

#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/engines.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/shard/per_parameter.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using zero::DType;
using namespace zero::testing;

template <class Plan>
Outcome train_lamb(const Scenario& run) {
  return train<Plan, zero::host, zero::Lamb, zero::AnyLossScaler>(
      run, zero::AnyLossScaler(zero::StaticLossScaler{}));
}

void expect_all_stages_agree(const Scenario& run, const std::string& what) {
  const Outcome s0 = train_lamb<zero::Stage<0>>(run);
  EXPECT_NE(s0.weights[2][0], initial_value(2, 0)) << what; // the weights moved
  expect_same_weights(s0, train_lamb<zero::Stage<1>>(run), true, what + " stage 1");
  expect_same_weights(s0, train_lamb<zero::Stage<2>>(run), true, what + " stage 2");
  expect_same_weights(s0, train_lamb<zero::Stage<3>>(run), true, what + " stage 3");
}

TEST(LambEngine, StagesAgreeBitwise) {
  expect_all_stages_agree({}, "fp32");
  expect_all_stages_agree({.accumulation = 3, .clipping = 0.05}, "accumulation 3, clip 0.05");
  expect_all_stages_agree({.dtype = DType::bfloat16, .bucket = 7, .steps = 3}, "bf16");
}

// Partitioners that cut parameters into one chunk per rank, or keep them whole on unequal shards.
template <class P>
void expect_partitioner_agrees(const std::string& name) {
  using S0 = zero::ShardingPlan<zero::partition_with<P>>;
  using S1 = zero::ShardingPlan<zero::shard_optimizer_states, zero::partition_with<P>>;
  using S3 = zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                                zero::shard_parameters, zero::partition_with<P>>;
  const Scenario run{.accumulation = 2, .bucket = 37};
  const Outcome s0 = train_lamb<S0>(run);
  expect_same_weights(s0, train_lamb<S1>(run), true, name + " stage 1");
  expect_same_weights(s0, train_lamb<S3>(run), true, name + " stage 3");
  // Other pieces, other last bits of the sums: the flat layout's weights agree to rounding.
  expect_same_weights(s0, train_lamb<zero::Stage<0>>(run), false, name + " against flat");
}

TEST(LambEngine, OtherPartitionersAgree) {
  expect_partitioner_agrees<zero::PerParameter>("per_parameter");
  expect_partitioner_agrees<zero::WholeParameterGreedy>("whole_parameter_greedy");
}

// zero::Lamb on each whole parameter, with every rank's gradient averaged, on this rank alone.
std::vector<std::vector<float>> reference_weights(const Scenario& run, int ranks) {
  const auto params = model();
  zero::Lamb lamb(zero::LambOptions{.lr = 0.01, .weight_decay = 0.01});
  std::vector<std::vector<float>> layers(5), exp_avg(5), exp_avg_sq(5);
  std::vector<std::vector<std::size_t>> sizes(5);
  for (const auto& p : params) {
    const auto l = static_cast<std::size_t>(p.layer);
    sizes[l].push_back(p.numel);
    layers[l].resize(layers[l].size() + p.numel);
  }
  for (std::size_t l = 0; l < 5; ++l) {
    for (std::size_t i = 0; i < layers[l].size(); ++i)
      layers[l][i] = initial_value(l, i);
    exp_avg[l].assign(layers[l].size(), 0.0f);
    exp_avg_sq[l].assign(layers[l].size(), 0.0f);
  }
  for (int step = 0; step < run.steps; ++step) {
    const auto update = lamb.begin_step();
    for (std::size_t l = 0; l < 5; ++l) {
      std::vector<float> grad(layers[l].size());
      for (std::size_t i = 0; i < grad.size(); ++i) {
        double sum = 0;
        for (int r = 0; r < ranks; ++r)
          sum += gradient_value(layers[l][i], r, step, 0, l, i);
        grad[i] = static_cast<float>(sum / ranks);
      }
      std::size_t at = 0;
      for (std::size_t n : sizes[l]) {
        const auto part = [&](std::vector<float>& v) { return zero::view(v).subview(at, n); };
        zero::fused_step(update, part(layers[l]), {part(exp_avg[l]), part(exp_avg_sq[l])},
                         zero::View<const float>(part(grad)));
        at += n;
      }
    }
  }
  return layers;
}

TEST(LambEngine, MatchesLambOnWholeParameters) {
  const Scenario run{.steps = 5};
  const Outcome s3 = train_lamb<zero::Stage<3>>(run);
  const auto want = reference_weights(run, world().size());
  ASSERT_EQ(s3.weights.size(), want.size());
  for (std::size_t l = 0; l < want.size(); ++l)
    for (std::size_t i = 0; i < want[l].size(); ++i)
      ASSERT_NEAR(s3.weights[l][i], want[l][i], 1e-5 * (std::fabs(want[l][i]) + 0.01))
          << "layer " << l << " element " << i;
}

// LAMB's step reads whole-parameter norms of the masters in three passes: split masters, which
// the element-wise steps reconstruct run by run, are refused by name.
TEST(LambEngine, RefusesSplitMasters) {
  zero::EngineOptions options;
  options.master = zero::MasterStorage::split_8bit;
  expect_error_contains(
      [&] {
        train<zero::Stage<1>, zero::host, zero::Lamb, zero::AnyLossScaler>(
            {.dtype = DType::bfloat16, .steps = 1}, zero::AnyLossScaler(zero::StaticLossScaler{}),
            options);
      },
      "split master weights (EngineOptions::master = split_8bit) are built for element-wise "
      "optimizers (Adam, AdamW, SGD); this engine runs Lamb");
}

} // namespace
