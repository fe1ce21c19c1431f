// DeepSpeed's learning-rate schedules against their formulas, restated here independently, at
// every step of long runs; DeepSpeed's step conventions (index -1 before the first step, the
// warm-up clamp to 2 steps, the initial betas of OneCycle); and no advance on a skipped step.

#include "zero/schedule/lr_scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace {

using zero::LrScheduler;
using zero::StepOutcome;

constexpr double tolerance = 1e-12; // relative; the schedules compute in double

void expect_close(double actual, double expected, std::int64_t step) {
  EXPECT_NEAR(actual, expected, tolerance * std::max(1.0, std::abs(expected))) << "step " << step;
}

// Runs the schedule through LrScheduler, checking lr() before every step against expected(i),
// where i is DeepSpeed's last_batch_iteration (-1 first).
template <class Expected>
void check_run(const zero::LrSchedule& schedule, double optimizer_lr, std::int64_t steps,
               Expected expected) {
  LrScheduler scheduler(schedule, optimizer_lr);
  for (std::int64_t i = -1; i < steps; ++i) {
    ASSERT_EQ(scheduler.last_batch_iteration(), i);
    expect_close(scheduler.lr(), expected(i), i);
    scheduler.step();
  }
}

double log_warmup(std::int64_t i, double warmup) {
  return std::log(static_cast<double>(i) + 1.0) / std::log(warmup);
}

TEST(WarmupLR, RisesLogarithmicallyThenHolds) {
  const zero::WarmupLR schedule{
      .warmup_min_lr = 1e-5, .warmup_max_lr = 1e-3, .warmup_num_steps = 100};
  check_run(schedule, 0.5, 400, [](std::int64_t i) {
    if (i < 0) return 1e-5;
    return 1e-5 + (1e-3 - 1e-5) * (i < 100 ? log_warmup(i, 100) : 1.0);
  });
}

TEST(WarmupLR, LinearRiseAndDeepSpeedsDefaults) {
  // warmup_max_lr unset: the optimizer's learning rate; one warm-up step counts as two.
  const zero::WarmupLR schedule{.warmup_num_steps = 1, .warmup_type = zero::WarmupType::linear};
  check_run(schedule, 0.02, 10, [](std::int64_t i) {
    if (i < 0) return 0.0;
    return 0.02 * (i < 2 ? static_cast<double>(i) / 2.0 : 1.0);
  });
  const zero::WarmupLR linear{
      .warmup_max_lr = 0.1, .warmup_num_steps = 300, .warmup_type = zero::WarmupType::linear};
  check_run(linear, 1.0, 700, [](std::int64_t i) {
    return i < 0 ? 0.0 : 0.1 * std::min(1.0, static_cast<double>(i) / 300.0);
  });
}

TEST(WarmupDecayLR, DecaysLinearlyToZeroAtTheTotal) {
  // The seed text's schedule: 300 steps, 30 of log warm-up up to 3e-5.
  const zero::WarmupDecayLR schedule{
      .total_num_steps = 300, .warmup_min_lr = 0, .warmup_max_lr = 3e-5, .warmup_num_steps = 30};
  check_run(schedule, 1.0, 500, [](std::int64_t i) {
    if (i < 0) return 0.0;
    if (i < 30) return 3e-5 * log_warmup(i, 30);
    return 3e-5 * std::max(0.0, (300.0 - static_cast<double>(i)) / 270.0);
  });
  // Points worked by hand.
  expect_close(schedule.lr(0), 0.0, 0);
  expect_close(schedule.lr(29), 3e-5, 29);
  expect_close(schedule.lr(165), 1.5e-5, 165);
  expect_close(schedule.lr(300), 0.0, 300);
}

TEST(WarmupCosineLR, ScalesTheOptimizerLearningRate) {
  const zero::WarmupCosineLR schedule{.total_num_steps = 1000,
                                      .warmup_min_ratio = 0.1,
                                      .warmup_num_steps = 100,
                                      .cos_min_ratio = 0.05};
  const double base = 6e-4;
  check_run(schedule, base, 1300, [&](std::int64_t i) {
    if (i < 0) return 0.0;
    if (i < 100) return base * (0.1 + 0.9 * log_warmup(i, 100));
    const double progress = std::min(1.0, static_cast<double>(i - 100 + 1) / 900.0);
    return base * (0.05 + 0.95 * 0.5 * (1 + std::cos(std::numbers::pi * progress)));
  });
  expect_close(schedule.lr(99 + 450, base), base * (0.05 + 0.95 * 0.5), 549); // half-way down
  expect_close(schedule.lr(5000, base), base * 0.05, 5000); // stays at the floor past the end
}

// One cycle of `first` steps up and `second` down, from the description rather than DeepSpeed's
// expression: the share of the way from the minimum to the maximum at the next step.
double triangle(std::int64_t i, double first, double second) {
  const double p = std::fmod(static_cast<double>(i) + 1.0, first + second);
  return p <= first ? p / first : (first + second - p) / second;
}

TEST(OneCycle, CyclesLearningRateAndMomentumThenDecays) {
  const zero::OneCycle schedule{.cycle_min_lr = 1e-4,
                                .cycle_max_lr = 1e-2,
                                .decay_lr_rate = 0.5,
                                .cycle_first_step_size = 200,
                                .cycle_second_step_size = 300,
                                .decay_step_size = 50,
                                .decay_mom_rate = 0.01};
  check_run(schedule, 1.0, 900, [](std::int64_t i) {
    if (i < 500) return 1e-4 + (1e-2 - 1e-4) * triangle(i, 200, 300);
    return 1e-4 / (1 + 0.5 * static_cast<double>(i - 500 + 1) / 50.0);
  });
  LrScheduler scheduler(schedule, 1.0);
  // DeepSpeed's constructor writes (cycle_min_mom, 0.99) into the optimizer before step one.
  EXPECT_EQ(scheduler.betas()->beta1, 0.8);
  EXPECT_EQ(scheduler.betas()->beta2, 0.99);
  for (std::int64_t i = 0; i < 900; ++i) {
    scheduler.step();
    const double expected = i < 500 ? 0.9 - 0.1 * triangle(i, 200, 300)
                                    : 0.9 * (1 + 0.01 * static_cast<double>(i - 500 + 1) / 50.0);
    expect_close(scheduler.betas()->beta1, expected, i);
    EXPECT_EQ(scheduler.betas()->beta2, 0.99);
  }
}

TEST(OneCycle, StairsHoldTheRateFlat) {
  const zero::OneCycle schedule{.cycle_min_lr = 0.0,
                                .cycle_max_lr = 1.0,
                                .cycle_first_step_size = 100,
                                .cycle_first_stair_count = 4,
                                .cycle_momentum = false};
  check_run(schedule, 1.0, 200, [](std::int64_t i) {
    const double p = std::fmod(static_cast<double>(i) + 1.0, 200.0);
    const double position = p <= 100 ? p * 4 / 100 : (200 - p) * 4 / 100;
    return std::floor(position) / 4;
  });
  EXPECT_EQ(schedule.lr(99), 1.0); // the peak itself is a stair
  EXPECT_EQ(schedule.lr(98), 0.75);
  EXPECT_EQ(schedule.lr(23), 0.0);
  EXPECT_EQ(schedule.lr(24), 0.25);
  EXPECT_FALSE(LrScheduler(schedule, 1.0).betas());
}

TEST(LrScheduler, DoesNotAdvanceOnAStepSkippedForOverflow) {
  const zero::WarmupDecayLR schedule{.total_num_steps = 50, .warmup_num_steps = 10};
  LrScheduler reference(schedule, 1.0);
  LrScheduler skipping(schedule, 1.0);
  std::vector<double> applied_lrs;
  for (int i = 0; i < 40; ++i) {
    applied_lrs.push_back(reference.lr());
    reference.step(StepOutcome::applied);
  }
  std::vector<double> seen;
  for (int i = 0; i < 60; ++i) {
    const double lr = skipping.lr();
    const bool overflow = i % 3 == 1;
    if (!overflow) seen.push_back(lr);
    skipping.step(overflow ? StepOutcome::skipped_for_overflow : StepOutcome::applied);
    if (overflow) {
      EXPECT_EQ(skipping.lr(), lr) << "the learning rate moved on a skipped step";
    }
  }
  EXPECT_EQ(skipping.last_batch_iteration(), 39);
  EXPECT_EQ(seen, applied_lrs);
}

TEST(LrScheduler, ResumesAndValidates) {
  const zero::WarmupLR schedule{.warmup_max_lr = 1e-3, .warmup_num_steps = 10};
  EXPECT_EQ(LrScheduler(schedule, 1.0, 4).lr(), schedule.lr(4, 1.0));
  EXPECT_STREQ(zero::schedule_name(zero::LrSchedule{schedule}), "WarmupLR");
  EXPECT_THROW(LrScheduler(zero::WarmupLR{.warmup_num_steps = 0}, 1.0), zero::Error);
  EXPECT_THROW(LrScheduler(zero::OneCycle{.cycle_first_step_size = 0}, 1.0), zero::Error);
  EXPECT_THROW(LrScheduler(schedule, 1.0, -2), zero::Error);
}

} // namespace
