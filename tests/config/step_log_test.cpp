// steps_per_print and wall_clock_breakdown, honoured rather than read and ignored: zero::StepLog
// gives the lines DeepSpeed's engine prints, every steps_per_print steps, from what the caller
// hands it.

#include "config_test_support.hpp"

#include <zero/engine/step_log.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using zero::testing::parse;

zero::StepRecord record(std::int64_t step, double loss, bool applied = true) {
  zero::StepRecord r;
  r.step = step;
  r.loss = loss;
  r.lr = 1e-3;
  r.result.applied = applied;
  r.result.loss_scale = 1024;
  r.result.seconds = {.reduction_wait = 0.001, .norm = 0.0005, .update = 0.002, .total = 0.004};
  r.result.reduction.communication_seconds = 0.004;
  r.result.reduction.exposed_seconds = 0.001;
  r.forward_seconds = 0.010;
  r.backward_seconds = 0.020;
  return r;
}

TEST(StepLog, PrintsEveryStepsPerPrintStepsWithTheIntervalsMeans) {
  const auto c = parse(R"({"steps_per_print": 2})").config;
  zero::StepLog log(zero::StepLogOptions::from_config(c));
  EXPECT_EQ(log.record(record(1, 1.0)), "");
  EXPECT_EQ(
      log.record(record(2, 3.0, false)),
      "step 2: loss 2.000000 | loss scale 1024 | lr 0.001 | skipped 1 of 2 | 34.000 ms/step\n");
  EXPECT_EQ(log.record(record(3, 5.0)), "");
  // A new interval: only steps 3 and 4.
  EXPECT_EQ(
      log.record(record(4, 7.0)),
      "step 4: loss 6.000000 | loss scale 1024 | lr 0.001 | skipped 0 of 2 | 34.000 ms/step\n");
}

TEST(StepLog, WallClockBreakdownAddsALine) {
  const auto c = parse(R"({"steps_per_print": 1, "wall_clock_breakdown": true})").config;
  zero::StepLog log(zero::StepLogOptions::from_config(c));
  EXPECT_EQ(log.record(record(1, 1.0)),
            "step 1: loss 1.000000 | loss scale 1024 | lr 0.001 | skipped 0 of 1 | 34.000 ms/step\n"
            "step 1 time (ms, mean of 1 steps): forward 10.000 | backward 20.000 | step 4.000 "
            "(reduction wait 1.000, norm 0.500, update 2.000) | gradient communication 4.000, 75% "
            "hidden\n");
}

TEST(StepLog, NothingUnlessAsked) {
  zero::StepLog quiet(zero::StepLogOptions::from_config(parse("{}").config));
  for (int step = 1; step <= 20; ++step)
    EXPECT_EQ(quiet.record(record(step, 1.0)), "");
  // The breakdown alone prints at DeepSpeed's default interval, 10 steps.
  const auto options =
      zero::StepLogOptions::from_config(parse(R"({"wall_clock_breakdown": true})").config);
  EXPECT_EQ(options.steps_per_print, 10);
}

} // namespace
