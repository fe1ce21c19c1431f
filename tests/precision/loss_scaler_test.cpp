// DynamicLossScaler against a line-by-line model of DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py) on long random overflow sequences, plus the behaviour
// spelled out step by step: hysteresis, consecutive hysteresis, growth windows counted from the
// last overflow, the minimum scale and its error, DeepSpeed's JSON names, and checkpointed state.

#include <zero/precision/loss_scaler.hpp>

#include <gtest/gtest.h>

#if ZERO_TEST_HAS_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

#include <cstdint>
#include <random>
#include <stdexcept>

namespace {

using zero::DynamicLossScaler;
using zero::DynamicLossScalerOptions;

// DeepSpeed's update_scale, transcribed: the reference the scaler must agree with.
struct DeepSpeedModel {
  double cur_scale;
  std::int64_t cur_iter = 0;
  std::int64_t last_overflow_iter = -1;
  double scale_factor;
  std::int64_t scale_window;
  double min_scale;
  int delayed_shift;
  int cur_hysteresis;
  bool consecutive_hysteresis;
  bool raise_error_at_min_scale;

  explicit DeepSpeedModel(const DynamicLossScalerOptions& o)
      : cur_scale(o.init_scale), scale_factor(o.scale_factor), scale_window(o.scale_window),
        min_scale(o.min_scale), delayed_shift(o.hysteresis), cur_hysteresis(o.hysteresis),
        consecutive_hysteresis(o.consecutive_hysteresis),
        raise_error_at_min_scale(o.raise_error_at_min_scale) {}

  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale && raise_error_at_min_scale)
          throw std::runtime_error("Current loss scale already at minimum");
        cur_scale = std::max(cur_scale / scale_factor, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      const std::int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }
};

// Runs `steps` random updates with the given overflow probability through both; both must
// agree on every scale, every error, and the scaler's state.
void compare_with_model(const DynamicLossScalerOptions& options, double overflow_probability,
                        int steps, unsigned seed) {
  DynamicLossScaler scaler(options);
  DeepSpeedModel model(options);
  std::mt19937 random(seed);
  std::bernoulli_distribution overflows(overflow_probability);
  for (int step = 0; step < steps; ++step) {
    const bool overflow = overflows(random);
    bool model_threw = false;
    try {
      model.update_scale(overflow);
    } catch (const std::runtime_error&) {
      model_threw = true;
    }
    bool scaler_threw = false;
    const auto before = scaler.state();
    try {
      scaler.update(overflow);
    } catch (const zero::Error& e) {
      scaler_threw = true;
      EXPECT_EQ(e.kind(), zero::ErrorKind::numerical);
      EXPECT_EQ(scaler.state().iteration, before.iteration)
          << "an error leaves the scaler as it was";
    }
    ASSERT_EQ(scaler_threw, model_threw) << "step " << step << " seed " << seed;
    if (model_threw) return; // DeepSpeed ends the run here
    ASSERT_EQ(scaler.scale(), model.cur_scale) << "step " << step << " seed " << seed;
    ASSERT_EQ(scaler.state().hysteresis_left, model.cur_hysteresis) << "step " << step;
    ASSERT_EQ(scaler.state().last_overflow_iteration, model.last_overflow_iter);
    ASSERT_EQ(scaler.state().iteration, model.cur_iter);
    ASSERT_EQ(scaler.last_step_skipped(), overflow);
  }
}

TEST(DynamicLossScaler, AgreesWithDeepSpeedOnRandomSequences) {
  unsigned seed = 1;
  for (int hysteresis : {1, 2, 3, 5})
    for (bool consecutive : {false, true})
      for (std::int64_t window : {1, 2, 7, 50, 1000})
        for (double probability : {0.002, 0.02, 0.2, 0.6})
          for (bool raise : {false, true}) {
            DynamicLossScalerOptions options;
            options.init_scale = 1024.0;
            options.scale_window = window;
            options.hysteresis = hysteresis;
            options.consecutive_hysteresis = consecutive;
            options.min_scale = 0.25;
            options.raise_error_at_min_scale = raise;
            compare_with_model(options, probability, 5000, seed++);
          }
}

TEST(DynamicLossScaler, AgreesWithDeepSpeedWithOtherFactors) {
  unsigned seed = 1000;
  for (double factor : {1.5, 3.0, 10.0})
    for (double min_scale : {1.0, 0.7, 1e-3}) {
      DynamicLossScalerOptions options;
      options.init_scale = 5000.0;
      options.scale_factor = factor;
      options.min_scale = min_scale;
      options.scale_window = 20;
      options.raise_error_at_min_scale = false;
      compare_with_model(options, 0.1, 20000, seed++);
    }
}

TEST(DynamicLossScaler, DefaultsAreDeepSpeeds) {
  const DynamicLossScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.scale_factor, 2.0);
  EXPECT_EQ(o.scale_window, 1000);
  EXPECT_EQ(o.hysteresis, 2);
  EXPECT_EQ(o.min_scale, 1.0);
  EXPECT_FALSE(o.consecutive_hysteresis);
  EXPECT_TRUE(o.raise_error_at_min_scale);
  const auto from_names = DynamicLossScalerOptions::from_deepspeed({});
  EXPECT_EQ(from_names.init_scale, o.init_scale);
  EXPECT_EQ(from_names.scale_window, o.scale_window);
  EXPECT_EQ(from_names.hysteresis, o.hysteresis);
  EXPECT_EQ(from_names.min_scale, o.min_scale);
}

TEST(DynamicLossScaler, GrowsAfterAWindowOfCleanSteps) {
  DynamicLossScaler scaler({.scale_window = 1000});
  // From the start, the scale doubles on the update whose iteration number is 1000: after
  // 1000 clean steps, at the 1001st.
  for (int i = 0; i < 1000; ++i)
    scaler.update(false);
  EXPECT_EQ(scaler.scale(), 65536.0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 131072.0);
  for (int i = 0; i < 999; ++i)
    scaler.update(false);
  EXPECT_EQ(scaler.scale(), 131072.0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 262144.0);
  // After an overflow the window restarts: 1000 clean steps are not enough, 1001 are.
  scaler.update(true); // hysteresis 2 -> 1, no decrease
  EXPECT_EQ(scaler.scale(), 262144.0);
  EXPECT_TRUE(scaler.last_step_skipped());
  for (int i = 0; i < 1000; ++i)
    scaler.update(false);
  EXPECT_FALSE(scaler.last_step_skipped());
  EXPECT_EQ(scaler.scale(), 262144.0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 524288.0);
}

TEST(DynamicLossScaler, HysteresisDelaysDecreasesAndIsNotRefilledByThem) {
  DynamicLossScaler scaler({.init_scale = 1024.0, .hysteresis = 3});
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1024.0); // two overflows tolerated
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512.0);
  scaler.update(false); // a clean step does not refill without consecutive_hysteresis
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 256.0);
}

TEST(DynamicLossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  DynamicLossScaler scaler({.init_scale = 1024.0, .hysteresis = 2, .consecutive_hysteresis = true});
  for (int i = 0; i < 10; ++i) {
    scaler.update(true);
    scaler.update(false);
  }
  EXPECT_EQ(scaler.scale(), 1024.0); // never two overflows in a row
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512.0);
}

TEST(DynamicLossScaler, MinimumScale) {
  DynamicLossScaler scaler({.init_scale = 4.0, .hysteresis = 1, .min_scale = 1.0});
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1.0);
  try {
    scaler.update(true);
    FAIL() << "no error at the minimum scale";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::numerical);
    EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scaler.scale(), 1.0);

  DynamicLossScaler lenient(
      {.init_scale = 3.0, .hysteresis = 1, .min_scale = 1.0, .raise_error_at_min_scale = false});
  lenient.update(true); // 1.5
  lenient.update(true); // clamped to 1
  lenient.update(true);
  EXPECT_EQ(lenient.scale(), 1.0);
  EXPECT_TRUE(lenient.last_step_skipped());
}

TEST(DynamicLossScaler, RejectsBadOptions) {
  const auto expect_invalid = [](DynamicLossScalerOptions o) {
    EXPECT_THROW(DynamicLossScaler{o}, zero::Error);
  };
  expect_invalid({.init_scale = 0.0});
  expect_invalid({.scale_factor = 1.0});
  expect_invalid({.scale_window = 0});
  expect_invalid({.hysteresis = 0});
  expect_invalid({.min_scale = -1.0});
  expect_invalid({.init_scale = 0.5, .min_scale = 1.0});
}

TEST(DynamicLossScaler, StateRoundTrips) {
  const DynamicLossScalerOptions options{
      .init_scale = 256.0, .scale_window = 5, .raise_error_at_min_scale = false};
  DynamicLossScaler scaler(options);
  std::mt19937 random(5);
  for (int i = 0; i < 37; ++i)
    scaler.update(random() % 4 == 0);
  DynamicLossScaler restored(options);
  restored.load_state(scaler.state());
  for (int i = 0; i < 200; ++i) {
    const bool overflow = random() % 7 == 0;
    scaler.update(overflow);
    restored.update(overflow);
    ASSERT_EQ(restored.scale(), scaler.scale()) << i;
  }
  EXPECT_THROW(restored.load_state({.scale = -1.0}), zero::Error);
}

TEST(StaticLossScaler, NeverChangesButRecordsSkips) {
  zero::StaticLossScaler scaler(128.0);
  scaler.update(true);
  EXPECT_TRUE(scaler.last_step_skipped());
  scaler.update(false);
  EXPECT_FALSE(scaler.last_step_skipped());
  EXPECT_EQ(scaler.scale(), 128.0);
  EXPECT_EQ(zero::StaticLossScaler().scale(), 1.0);
  EXPECT_THROW(zero::StaticLossScaler(0.0), zero::Error);
}

#if ZERO_TEST_HAS_NLOHMANN_JSON
TEST(DynamicLossScaler, FromDeepSpeedJson) {
  const auto fp16 = nlohmann::json::parse(R"({
    "enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
    "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 0.5})");
  const auto o = DynamicLossScalerOptions::from_deepspeed_json(fp16);
  EXPECT_EQ(o.init_scale, 4096.0);
  EXPECT_EQ(o.scale_window, 500);
  EXPECT_EQ(o.hysteresis, 3);
  EXPECT_TRUE(o.consecutive_hysteresis);
  EXPECT_EQ(o.min_scale, 0.5);
  EXPECT_EQ(o.scale_factor, 2.0);

  const auto defaults = DynamicLossScalerOptions::from_deepspeed_json(nlohmann::json::object());
  EXPECT_EQ(defaults.init_scale, 65536.0);
  EXPECT_EQ(defaults.hysteresis, 2);

  EXPECT_THROW(DynamicLossScalerOptions::from_deepspeed_json(
                   nlohmann::json::parse(R"({"loss_scale": 128})")),
               zero::Error);
  EXPECT_THROW(DynamicLossScalerOptions::from_deepspeed_json(
                   nlohmann::json::parse(R"({"initial_scale_power": -1})")),
               zero::Error);
}
#endif

} // namespace
