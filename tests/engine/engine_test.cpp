// The engine's promises, at 1, 2 and 3 ranks:
// - stages 1, 2, 3 (and a shard_within plan) give the weights stage 0 gives: bit for bit in
//   deterministic mode, to 1e-6 otherwise; with gradient accumulation, clipping and fp16 loss
//   scaling, including a step skipped on every rank when one rank alone sees an infinity;
// - per-rank model-state memory is the ZeRO paper's formula (plus what the docs list);
// - each step communicates 2Ψ (stages 0-2) or 3Ψ (stage 3) elements.
// The "backward" is synthetic but reads the acquired weights, so stage 3's gathers are exercised.

#include "keep_small_whole.hpp"
#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/shard/per_parameter.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace engine_test {

using zero::DType;
using namespace zero::testing;

template <class Scaler = zero::StaticLossScaler>
void expect_all_stages_agree(const Scenario& run, const std::string& what,
                             Scaler scaler = Scaler{}) {
  const Outcome s0 = train<zero::Stage<0>>(run, scaler);
  // The weights moved: the test would pass trivially otherwise.
  EXPECT_NE(s0.weights[2][0], initial_value(2, 0)) << what;
  expect_same_weights(s0, train<zero::Stage<1>>(run, scaler), run.deterministic, what + " stage 1");
  expect_same_weights(s0, train<zero::Stage<2>>(run, scaler), run.deterministic, what + " stage 2");
  expect_same_weights(s0, train<zero::Stage<3>>(run, scaler), run.deterministic, what + " stage 3");
}

TEST(Engine, StagesAgreeBitwiseInFp32) {
  expect_all_stages_agree({}, "fp32");
}

TEST(Engine, StagesAgreeWithAccumulationAndClipping) {
  expect_all_stages_agree({.accumulation = 3, .clipping = 0.05}, "accumulation 3, clip 0.05");
}

TEST(Engine, StagesAgreeInHalfWithOneBigBucket) {
  expect_all_stages_agree({.dtype = DType::float16, .bucket = 1 << 20}, "fp16");
  expect_all_stages_agree({.dtype = DType::bfloat16, .bucket = 7, .steps = 3},
                          "bf16, 7-element buckets");
}

TEST(Engine, StagesAgreeToRoundingWithoutDeterministicMode) {
  expect_all_stages_agree({.accumulation = 2, .deterministic = false},
                          "accumulation 2, not deterministic");
}

TEST(Engine, Stage3PersistentLayersAgree) {
  const Scenario run{.persistence = 100};
  expect_same_weights(train<zero::Stage<0>>(run), train<zero::Stage<3>>(run), true,
                      "persistence 100");
}

TEST(Engine, ShardWithinOneRankIsReplicatedOptimizerState) {
  // Each rank its own shard group: states replicated, gradients averaged over the replicas.
  using Plan = zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                                  zero::shard_within<1>>;
  const Scenario run{.deterministic = false};
  expect_same_weights(train<zero::Stage<0>>(run), train<Plan>(run), false, "shard_within<1>");
}

// Stages 0-3 with partitioner P. Without clipping they give the weights of the flat contiguous
// stage 0 bit for bit (every element is reduced in rank order and updated alone); with clipping
// the norm adds up P's blocks, so the four stages agree with each other.
template <class P>
void expect_partitioner_agrees(const std::string& name) {
  using S0 = zero::ShardingPlan<zero::partition_with<P>>;
  using S1 = zero::ShardingPlan<zero::shard_optimizer_states, zero::partition_with<P>>;
  using S2 = zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                                zero::partition_with<P>>;
  using S3 = zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                                zero::shard_parameters, zero::partition_with<P>>;
  const Scenario plain{.accumulation = 2, .bucket = 37};
  const Outcome reference = train<zero::Stage<0>>(plain);
  expect_same_weights(reference, train<S0>(plain), true, name + " stage 0");
  expect_same_weights(reference, train<S1>(plain), true, name + " stage 1");
  expect_same_weights(reference, train<S2>(plain), true, name + " stage 2");
  expect_same_weights(reference, train<S3>(plain), true, name + " stage 3");
  const Scenario clipped{.clipping = 0.05, .bucket = 1 << 20};
  const Outcome c0 = train<S0>(clipped);
  expect_same_weights(c0, train<S1>(clipped), true, name + " clipped, stage 1");
  expect_same_weights(c0, train<S2>(clipped), true, name + " clipped, stage 2");
  expect_same_weights(c0, train<S3>(clipped), true, name + " clipped, stage 3");
  const Scenario half{.dtype = DType::bfloat16, .bucket = 11, .steps = 3, .persistence = 50};
  expect_same_weights(train<S0>(half), train<S3>(half), true, name + " bf16, stage 3");
}

// A user's partitioner (examples/custom_partitioner): parameters under 64 elements stay whole on
// the least-loaded rank, larger ones are cut into one chunk per rank.
struct KeepTinyWhole : KeepSmallWhole {
  KeepTinyWhole() { threshold = 64; }
};

TEST(Engine, PerParameterChunksAgree) {
  expect_partitioner_agrees<zero::PerParameter>("per_parameter");
}

TEST(Engine, WholeParametersOnUnequalShardsAgree) {
  expect_partitioner_agrees<zero::WholeParameterGreedy>("whole_parameter_greedy");
}

TEST(Engine, AUsersPartitionerAgrees) {
  expect_partitioner_agrees<KeepTinyWhole>("keep_small_whole");
}

TEST(Engine, SgdWithMomentumAgreesToo) {
  const Scenario run{.accumulation = 2};
  auto s0 = train<zero::Stage<0>, zero::host, zero::SGD>(run);
  expect_same_weights(s0, train<zero::Stage<3>, zero::host, zero::SGD>(run), true, "SGD stage 3");
}

TEST(Engine, AnInfinityOnOneRankSkipsTheStepEverywhere) {
  auto& world = zero::testing::world();
  const Scenario run{.dtype = DType::float16, .steps = 4, .scale = 1024, .infinity_step = 2};
  zero::DynamicLossScalerOptions scaling;
  scaling.init_scale = 1024;
  scaling.hysteresis = 1;
  const auto s0 = train<zero::Stage<0>, zero::host, zero::Adam, zero::DynamicLossScaler>(
      run, zero::DynamicLossScaler(scaling));
  const auto s2 = train<zero::Stage<2>, zero::host, zero::Adam, zero::DynamicLossScaler>(
      run, zero::DynamicLossScaler(scaling));
  for (const auto* outcome : {&s0, &s2}) {
    ASSERT_EQ(outcome->steps.size(), 4u);
    EXPECT_TRUE(outcome->steps[1].applied);
    EXPECT_FALSE(outcome->steps[2].applied) << "rank " << world.size() - 1 << " saw an infinity";
    EXPECT_FALSE(std::isfinite(outcome->steps[2].grad_norm)) << "the norm reports the overflow";
    EXPECT_TRUE(outcome->steps[3].applied);
    EXPECT_EQ(outcome->steps[2].loss_scale, 1024);
    EXPECT_EQ(outcome->steps[3].loss_scale, 512) << "the scale halved after the overflow";
  }
  expect_same_weights(s0, s2, true, "fp16 with a skipped step");
  // A run that stops before the overflow ends where the skipping run ended after step 1... and
  // the skipped step changed nothing: compare with a run of the applied steps only.
}

TEST(Engine, SkippedStepChangesNothing) {
  const Scenario with_skip{.steps = 3, .infinity_step = 2};
  const Scenario before{.steps = 2};
  expect_same_weights(train<zero::Stage<3>>(with_skip), train<zero::Stage<3>>(before), true,
                      "skip at the last step");
}

TEST(Engine, MemoryFollowsThePapersFormula) {
  auto& world = zero::testing::world();
  const double n = world.size();
  for (int stage = 0; stage <= 3; ++stage) {
    const Scenario run{.dtype = DType::float16, .steps = 1};
    Outcome o = stage == 0   ? train<zero::Stage<0>>(run)
                : stage == 1 ? train<zero::Stage<1>>(run)
                : stage == 2 ? train<zero::Stage<2>>(run)
                             : train<zero::Stage<3>>(run);
    const double psi = double(o.psi), padded = double(o.padded);
    // Exactly what the engine holds (fp16 weights and gradients, fp32 master, m and v):
    // stage 1 also keeps its reduced gradient shard (2Ψ/N) next to the full gradient.
    const double full = padded, shard = padded / n;
    const double expected[] = {(2 + 2 + 12) * full, (2 + 2) * full + (12 + 2) * shard,
                               2 * full + (2 + 12) * shard, (2 + 2 + 12) * shard};
    EXPECT_EQ(double(o.memory.model_states()), expected[stage]) << "stage " << stage;
    // And the paper's formula for Ψ unpadded, within padding and stage 1's shard.
    const double slack = 16 * (padded - psi) + (stage == 1 ? 2 * shard : 0);
    EXPECT_NEAR(double(o.memory.model_states()), o.paper_bytes, slack + 1) << "stage " << stage;
    zero::estimate::ModelStateQuery query;
    query.parameters = psi;
    query.data_parallel = world.size();
    query.stage = stage;
    EXPECT_EQ(o.paper_bytes, zero::estimate::model_state_memory(query).total());
  }
}

TEST(Engine, CommunicationPerStepIs2PsiOr3Psi) {
  const Scenario run{.steps = 2};
  const Outcome s[] = {train<zero::Stage<0>>(run), train<zero::Stage<1>>(run),
                       train<zero::Stage<2>>(run), train<zero::Stage<3>>(run)};
  for (int stage = 0; stage <= 3; ++stage) {
    const auto& c = s[stage].steps[1].communication;
    const double padded = double(s[stage].padded);
    // Stage 3 gathers each layer for forward and again for backward, except the last one: from
    // the second step on the gather knows that backward starts where forward ended and keeps it.
    const double expected = stage == 3 ? 3 * padded - double(s[3].last_layer_padded) : 2 * padded;
    // One scalar is all-reduced besides (the sum of squares behind the norm and the overflow
    // check).
    EXPECT_EQ(double(c.volume_elements()), expected + 2) << "stage " << stage;
    if (stage == 0) {
      EXPECT_EQ(c[zero::Collective::all_reduce].elements, s[0].padded + 1);
    }
    if (stage == 3) {
      EXPECT_EQ(c[zero::Collective::all_gather].elements, 2 * s[3].padded - s[3].last_layer_padded);
    }
  }
}

TEST(Engine, Stage3HandlesStayValidWhileOthersAreGathered) {
  // Hold every layer at once (the gather pool grows while handles are alive), then check each
  // handle still shows its own layer's weights.
  auto& world = zero::testing::world();
  zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::Adam,
               zero::StaticLossScaler>
      engine(world, model(), zero::Adam{}, zero::StaticLossScaler{}, {});
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> init(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < init.size(); ++i)
      init[i] = initial_value(l, i);
    engine.set_layer(l, init);
  }
  std::vector<zero::LayerParameters> held;
  for (std::size_t l = 0; l < engine.layers(); ++l)
    held.push_back(engine.acquire(l));
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    const auto values = held[l].values<float>();
    ASSERT_EQ(values.size(), engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(values[i], initial_value(l, i)) << l << " " << i;
  }
  held.clear();
  expect_error_contains([&] { (void)engine.step(); }, "step() after 0 of 1 micro-steps");
}

TEST(Engine, MisuseIsNamed) {
  auto& world = zero::testing::world();
  zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
               zero::StaticLossScaler>
      engine(world, model(), zero::Adam{}, zero::StaticLossScaler{}, {});
  auto expect_error = [](auto&& call, const std::string& needle) {
    try {
      call();
      FAIL() << "expected: " << needle;
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { (void)engine.step(); }, "step() after 0 of 1 micro-steps");
  expect_error([&] { (void)engine.acquire(9); }, "no layer 9 (the model has 5)");
  expect_error([&] { (void)engine.gradients<zero::half>(0); },
               "the compute type is float, not half");
  std::vector<float> wrong(3);
  expect_error([&] { engine.set_layer(0, wrong); },
               "set_layer: layer 0 has 96 elements, rank 0 passed 3");
  auto g = engine.gradients<float>(4);
  std::fill(g.begin(), g.end(), 0.0f);
  engine.grads_ready(4);
  expect_error([&] { engine.grads_ready(4); }, "layer 4 was handed over twice");
  for (std::size_t l = 4; l-- > 0;) {
    auto grads = engine.gradients<float>(l);
    std::fill(grads.begin(), grads.end(), 0.0f);
    engine.grads_ready(l);
  }
  EXPECT_TRUE(engine.step().applied);
}

// An engine of `Plan` on the test model with the scenario's initial weights.
template <class Plan>
struct Fixture {
  using Engine =
      zero::Engine<Plan, zero::MpiCommunicator, zero::host, zero::Adam, zero::StaticLossScaler>;
  Engine engine;
  explicit Fixture(zero::EngineOptions options = {}, std::size_t wide_layer = 0)
      : engine(zero::testing::world(), model(wide_layer), zero::Adam({.lr = 0.01}),
               zero::StaticLossScaler{}, options) {
    for (std::size_t l = 0; l < engine.layers(); ++l) {
      std::vector<float> init(engine.layout().layer(l).numel);
      for (std::size_t i = 0; i < init.size(); ++i)
        init[i] = initial_value(l, i);
      engine.set_layer(l, init);
    }
  }
  // One micro-step's backward with gradients 0.1 * weight + rank-dependent noise.
  void backward(int step) {
    for (std::size_t l = engine.layers(); l-- > 0;) {
      auto weights = engine.acquire(l);
      write_gradients<float>(engine.template gradients<float>(l), weights.template values<float>(),
                             Scenario{}, zero::testing::world().rank(), step, 0, l,
                             zero::testing::world().size());
      engine.grads_ready(l);
    }
  }
};

TEST(Engine, Stage1HandlesKeptAcrossTheStepSeeTheNewWeights) {
  // Stages 1/2 all-gather after step() returns; a handle kept from before must not see a layer
  // half gathered.
  Fixture<zero::Stage<1>> f({}, 300000);
  std::vector<zero::LayerParameters> kept;
  for (std::size_t l = 0; l < f.engine.layers(); ++l)
    kept.push_back(f.engine.acquire(l));
  f.backward(0);
  ASSERT_TRUE(f.engine.step().applied);
  // Read the kept views first: get_layer's own collective would wait for the gathers.
  std::vector<std::vector<float>> seen;
  for (const auto& handle : kept) {
    const auto values = handle.values<float>();
    seen.emplace_back(values.begin(), values.end());
  }
  for (std::size_t l = 0; l < f.engine.layers(); ++l) {
    const std::vector<float> master = f.engine.get_layer(l);
    ASSERT_EQ(seen[l].size(), master.size());
    for (std::size_t i = 0; i < master.size(); ++i)
      ASSERT_EQ(seen[l][i], master[i]) << "layer " << l << " element " << i;
  }
}

TEST(Engine, AStepRefusedForAHeldLayerChangesNothing) {
  // Stage 3 cannot update a layer while it is gathered for someone: step() says so before any
  // collective, and the retry gives the weights of a clean run (the step counter did not move).
  Fixture<zero::Stage<3>> refused, clean;
  refused.backward(0);
  clean.backward(0);
  {
    auto held = refused.engine.acquire(0);
    expect_error_contains([&] { (void)refused.engine.step(); },
                          "step() while layer 0 is still acquired");
  }
  ASSERT_TRUE(refused.engine.step().applied);
  ASSERT_TRUE(clean.engine.step().applied);
  EXPECT_EQ(refused.engine.optimizer().step_count(), 1);
  for (std::size_t l = 0; l < clean.engine.layers(); ++l)
    EXPECT_EQ(refused.engine.get_layer(l), clean.engine.get_layer(l)) << "layer " << l;
}

TEST(Engine, Stage3SetLayerAfterAPrefetchIsSeen) {
  Fixture<zero::Stage<3>> f;
  { auto w0 = f.engine.acquire(0); } // prefetches layer 1
  std::vector<float> hundred(f.engine.layout().layer(1).numel, 100.0f);
  f.engine.set_layer(1, hundred);
  const auto w1 = f.engine.acquire(1);
  for (float v : w1.values<float>())
    ASSERT_EQ(v, 100.0f);
}

// A step of a loop with activation checkpointing over 5 layers in two segments, [0, 3) and [3, 5):
// forward, then backward of the last segment (kept from forward), then the first segment run
// forward again and backward. `recompute` false: plain training's order.
template <class Engine>
zero::StepResult checkpointed_step(Engine& engine, bool recompute, int step) {
  auto visit = [&](std::size_t l, bool backward) {
    auto weights = engine.acquire(l);
    if (!backward) return;
    write_gradients<float>(engine.template gradients<float>(l), weights.template values<float>(),
                           Scenario{}, zero::testing::world().rank(), step, 0, l,
                           zero::testing::world().size());
    engine.grads_ready(l);
  };
  for (std::size_t l = 0; l < 5; ++l)
    visit(l, false);
  for (std::size_t l : {4, 3})
    visit(l, true);
  if (recompute)
    for (std::size_t l : {0, 1, 2})
      visit(l, false);
  for (std::size_t l : {2, 1, 0})
    visit(l, true);
  return engine.step();
}

TEST(Engine, Stage3PrefetchFollowsTheOrderOfTheLastStep) {
  // The first step can only guess from the direction of travel, which a re-run segment defeats;
  // from the second step on every acquisition but the first finds its layer gathered ahead. A
  // step in another order is noticed, and the step after it follows the new order.
  Fixture<zero::Stage<3>> f;
  const zero::StepResult first = checkpointed_step(f.engine, true, 0);
  EXPECT_GT(first.gathers.on_demand, 1u);
  for (int step = 1; step < 3; ++step) {
    const zero::StepResult next = checkpointed_step(f.engine, true, step);
    EXPECT_EQ(next.gathers.on_demand, 1u) << "step " << step;
    EXPECT_EQ(next.gathers.prefetched, 12u) << "step " << step;
    EXPECT_EQ(next.gathers.order_changes, 0u) << "step " << step;
  }
  const zero::StepResult changed = checkpointed_step(f.engine, false, 3);
  EXPECT_EQ(changed.gathers.order_changes, 1u);
  const zero::StepResult plain = checkpointed_step(f.engine, false, 4);
  EXPECT_EQ(plain.gathers.on_demand, 1u);
  EXPECT_EQ(plain.gathers.prefetched, 9u);
  EXPECT_EQ(plain.gathers.order_changes, 0u);
}

TEST(Engine, OnlyRankZerosValuesCount) {
  // The other ranks may pass anything, nothing included, without anyone waiting forever.
  Fixture<zero::Stage<2>> f;
  auto& world = zero::testing::world();
  std::vector<float> values(f.engine.layout().layer(2).numel, 0.5f);
  f.engine.set_layer(2, world.rank() == 0 ? zero::View<const float>(values)
                                          : zero::View<const float>());
  for (float v : f.engine.get_layer(2))
    ASSERT_EQ(v, 0.5f);
}

TEST(Engine, ALayerWithoutElementsMayComeLast) {
  // Handing over an empty layer changes nothing, in whichever order it comes.
  auto& world = zero::testing::world();
  std::vector<zero::ParameterSpec> params = {{"empty", 0, DType::float32, 0},
                                             {"w", 10, DType::float32, 1}};
  zero::EngineOptions options;
  options.gradient_accumulation_steps = 2;
  zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
               zero::StaticLossScaler>
      engine(world, params, zero::Adam{}, zero::StaticLossScaler{}, options);
  for (int micro = 0; micro < 2; ++micro)
    for (std::size_t l : {std::size_t{1}, std::size_t{0}}) {
      auto g = engine.gradients<float>(l);
      std::fill(g.begin(), g.end(), 1.0f);
      engine.grads_ready(l);
    }
  EXPECT_TRUE(engine.step().applied);
}

TEST(Engine, RanksGivenDifferentOptionsAreToldWhich) {
  auto& world = zero::testing::world();
  if (world.size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  zero::EngineOptions options;
  options.reduce_bucket_elements = world.rank() == 1 ? 999 : 1000;
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                     zero::StaticLossScaler>
            engine(world, model(), zero::Adam{}, zero::StaticLossScaler{}, options);
      },
      "rank 1 was given a different EngineOptions::reduce_bucket_elements than rank 0");
}

// Where a config asks the states to go is checked against the placement on every rank: ranks given
// different configs are told so alike, not refused on one rank while the others wait for it.
TEST(Engine, RanksAskedForDifferentOffloadAreToldWhich) {
  auto& world = zero::testing::world();
  if (world.size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  zero::EngineOptions options;
  if (world.rank() == 1) options.offload_optimizer = zero::config::OffloadDevice::nvme;
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                     zero::StaticLossScaler>
            engine(world, model(), zero::Adam{}, zero::StaticLossScaler{}, options);
      },
      "rank 1 was given a different EngineOptions::offload_optimizer than rank 0");
}

} // namespace engine_test

namespace engine_test {

TEST(EngineEntryPoints, RanksRegisteringDifferentModelsAreToldWhich) {
  auto& world = zero::testing::world();
  if (world.size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  auto params = model();
  if (world.rank() == 1) params[1].numel += 1;
  expect_error_contains(
      [&] {
        zero::Engine<zero::Stage<2>, zero::MpiCommunicator, zero::host, zero::Adam,
                     zero::StaticLossScaler>
            engine(world, params, zero::Adam{}, zero::StaticLossScaler{});
      },
      "ranks registered different parameters: parameter #1 is rank 0: '" + params[1].name + "' (" +
          std::to_string(params[1].numel - (world.rank() == 1 ? 1 : 0)) + " x float");
}

// A rank with one batch fewer reads the weights while the others step: an error on every rank,
// saying what each rank called, instead of a job that waits until the watchdog ends it.
template <class Plan>
void expect_step_against_get_layer_fails_everywhere() {
  auto& world = zero::testing::world();
  Fixture<Plan> f;
  f.backward(0);
  try {
    if (world.rank() == 0)
      (void)f.engine.step();
    else
      (void)f.engine.get_layer(0);
    ADD_FAILURE() << "no error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("collective mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 called all_gather("), std::string::npos)
        << e.what();
  }
}

TEST(EngineEntryPoints, AStepOnOneRankWhileAnotherReadsALayerIsAnErrorOnEveryRank) {
  if (zero::testing::world().size() < 2)
    GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  expect_step_against_get_layer_fails_everywhere<zero::Stage<1>>();
  expect_step_against_get_layer_fails_everywhere<zero::Stage<2>>();
  expect_step_against_get_layer_fails_everywhere<zero::Stage<3>>();
}

} // namespace engine_test
