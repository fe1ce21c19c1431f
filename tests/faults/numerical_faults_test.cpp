// Numerical dead ends: NaN gradients on one rank only skip the step on every rank, every time; a
// loss scale at its minimum fails as DeepSpeed does (raise_error_at_min_scale); and a run that
// skips step after step stops after EngineOptions::max_consecutive_skipped_steps with the same
// message on every rank, instead of skipping forever.

#include "comm_test.hpp"

#include <zero/engine/engine.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using zero::testing::world;

std::vector<zero::ParameterSpec> model() {
  return {{"a", 300, zero::DType::float32, 0},
          {"b", 77, zero::DType::float32, 1},
          {"c", 500, zero::DType::float32, 2}};
}

// Runs `steps` steps; at each step listed in `nan_steps`, the last rank's gradient of layer 1 has a
// NaN. Returns the outcome of every step that returned and the error of the one that threw.
struct Run {
  std::vector<zero::StepResult> results;
  std::string error;
  std::vector<std::vector<float>> weights_before, weights_after;
};

template <class Stage, class Scaler>
Run run(Scaler scaler, std::int64_t limit, const std::vector<bool>& nan_steps) {
  auto& comm = world();
  zero::EngineOptions options;
  options.max_consecutive_skipped_steps = limit;
  options.reduce_bucket_elements = 128;
  zero::Engine<Stage, zero::MpiCommunicator, zero::host, zero::SGD, Scaler> engine(
      comm, model(), zero::SGD({.lr = 0.1}), scaler, options);
  Run out;
  for (std::size_t l = 0; l < engine.layers(); ++l)
    out.weights_before.push_back(engine.get_layer(l));
  for (std::size_t step = 0; step < nan_steps.size(); ++step) {
    for (std::size_t l = 0; l < engine.layers(); ++l)
      (void)engine.acquire(l);
    for (std::size_t l = engine.layers(); l-- > 0;) {
      (void)engine.acquire(l);
      auto g = engine.template gradients<float>(l);
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = 0.25f * float(i % 7) - 0.5f;
      if (nan_steps[step] && l == 1 && comm.rank() == comm.size() - 1)
        g[3] = std::numeric_limits<float>::quiet_NaN();
      engine.grads_ready(l);
    }
    try {
      out.results.push_back(engine.step());
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), zero::ErrorKind::numerical) << e.what();
      out.error = e.what();
      break;
    }
  }
  for (std::size_t l = 0; l < engine.layers(); ++l)
    out.weights_after.push_back(engine.get_layer(l));
  return out;
}

TEST(NumericalFaults, NanOnOneRankSkipsTheStepOnEveryRankEveryTime) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::vector<bool> nans(6, true);
    const auto check = [&](const auto& r) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      ASSERT_EQ(r.results.size(), nans.size());
      for (const auto& s : r.results) {
        EXPECT_FALSE(s.applied);
        EXPECT_EQ(s.loss_scale, 1.0);
      }
      EXPECT_EQ(r.weights_after, r.weights_before) << "a skipped step changed the weights";
    };
    if (stage == 1) check(run<zero::Stage<1>>(zero::StaticLossScaler{}, 0, nans));
    if (stage == 2) check(run<zero::Stage<2>>(zero::StaticLossScaler{}, 0, nans));
    if (stage == 3) check(run<zero::Stage<3>>(zero::StaticLossScaler{}, 0, nans));
  }
}

TEST(NumericalFaults, ConsecutiveSkippedStepsStopTheRunOnEveryRank) {
  const auto r = run<zero::Stage<2>>(zero::StaticLossScaler{}, 4, std::vector<bool>(10, true));
  EXPECT_EQ(r.results.size(), 3u) << "the fourth skipped step in a row must fail";
  EXPECT_NE(r.error.find("4 steps in a row were skipped because some rank's gradients were NaN "
                         "or infinite (loss scale 1.000000, static)"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("max_consecutive_skipped_steps"), std::string::npos) << r.error;
}

TEST(NumericalFaults, AStepThatIsAppliedStartsTheCountAgain) {
  const std::vector<bool> nans = {true, true, true, false, true, true, true, false, true};
  const auto r = run<zero::Stage<3>>(zero::StaticLossScaler{}, 4, nans);
  EXPECT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.results.size(), nans.size());
  for (std::size_t i = 0; i < nans.size(); ++i)
    EXPECT_EQ(r.results[i].applied, !nans[i]) << "step " << i;
}

TEST(NumericalFaults, ScaleAtItsMinimumFailsAsDeepSpeedDoes) {
  zero::DynamicLossScalerOptions o;
  o.init_scale = 4;
  o.min_scale = 1;
  o.hysteresis = 1;
  o.raise_error_at_min_scale = true;
  const auto r = run<zero::Stage<2>>(zero::DynamicLossScaler(o), 0, std::vector<bool>(10, true));
  // Skipped at 4 (the scale drops to 2) and at 2 (to 1); the overflow at 1 fails.
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].loss_scale, 4.0);
  EXPECT_EQ(r.results[1].loss_scale, 2.0);
  EXPECT_NE(r.error.find("gradients overflowed with the loss scale already at its minimum"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("lower min_scale"), std::string::npos) << r.error;
}

TEST(NumericalFaults, WithoutTheMinimumErrorTheSkipLimitStillEndsTheRun) {
  zero::DynamicLossScalerOptions o;
  o.init_scale = 4;
  o.min_scale = 1;
  o.hysteresis = 1;
  o.raise_error_at_min_scale = false;
  const auto r = run<zero::Stage<1>>(zero::DynamicLossScaler(o), 6, std::vector<bool>(20, true));
  EXPECT_EQ(r.results.size(), 5u);
  EXPECT_NE(r.error.find("6 steps in a row were skipped"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("(loss scale 1.000000, dynamic)"), std::string::npos) << r.error;
}

TEST(NumericalFaults, TheLimitIsCheckedWhenTheEngineIsMade) {
  zero::EngineOptions options;
  options.max_consecutive_skipped_steps = -1;
  try {
    zero::Engine<zero::Stage<1>, zero::MpiCommunicator, zero::host, zero::SGD,
                 zero::StaticLossScaler>
        engine(world(), model(), zero::SGD({.lr = 0.1}), zero::StaticLossScaler{}, options);
    FAIL() << "a negative limit was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_consecutive_skipped_steps"), std::string::npos);
  }
}

} // namespace
