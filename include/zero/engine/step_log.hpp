#pragma once
// StepLog: DeepSpeed's steps_per_print and wall_clock_breakdown for a training loop the caller
// writes. DeepSpeed's engine owns the loop and prints by itself; here the caller hands each step
// over (what step() returned, the loss, the learning rate, and the forward and backward times it
// measured) and prints what comes back, on one rank:
//
//   zero::StepLog log(zero::StepLogOptions::from_config(config));
//   ...
//   const zero::StepResult r = engine.step();
//   const std::string lines = log.record({step + 1, loss, lr, r, forward_s, backward_s});
//   if (rank == 0) std::fputs(lines.c_str(), stdout);
//
// Every `steps_per_print` steps it gives one line: the interval's mean loss, the loss scale, the
// learning rate, the steps skipped for overflow and the mean step time. With wall_clock_breakdown,
// a second line splits the mean step into forward, backward and step() (its wait for the gradient
// buckets, the norm, the update), with the time the gradient reduction communicated and the share
// of it that backward hid.

#include "zero/config/config.hpp"
#include "zero/core/error.hpp"
#include "zero/engine/report.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zero {

struct StepLogOptions {
  std::int64_t steps_per_print = 0; // 0: never
  bool wall_clock_breakdown = false;

  // A config without steps_per_print prints nothing, unless it asks for the breakdown: then every
  // 10 steps, DeepSpeed's default.
  static StepLogOptions from_config(const config::Config& c) {
    return {c.steps_per_print.value_or(c.wall_clock_breakdown ? 10 : 0), c.wall_clock_breakdown};
  }
};

// One step as the log sees it. `step` counts steps done, from 1; times are in seconds.
struct StepRecord {
  std::int64_t step = 0;
  double loss = 0;
  double lr = 0;
  StepResult result{};
  double forward_seconds = 0;
  double backward_seconds = 0;
  double step_seconds = 0; // forward, backward and step() together; 0: their sum
};

// What an interval of steps added up to.
struct StepTotals {
  std::int64_t steps = 0, skipped = 0;
  double loss = 0, seconds = 0, forward = 0, backward = 0;
  StepTimes step{};
  double communication = 0, exposed = 0; // the gradient reduction's (last micro-step's)

  void add(const StepRecord& r) {
    ++steps;
    skipped += r.result.applied ? 0 : 1;
    loss += r.loss;
    forward += r.forward_seconds;
    backward += r.backward_seconds;
    step.reduction_wait += r.result.seconds.reduction_wait;
    step.norm += r.result.seconds.norm;
    step.update += r.result.seconds.update;
    step.total += r.result.seconds.total;
    seconds += r.step_seconds > 0 ? r.step_seconds
                                  : r.forward_seconds + r.backward_seconds + r.result.seconds.total;
    communication += r.result.reduction.communication_seconds;
    exposed += r.result.reduction.exposed_seconds;
  }
};

namespace detail {
inline std::string format_line(const char* format, auto... values) {
  char text[512];
  const int n = std::snprintf(text, sizeof text, format, values...);
  return std::string(text, n < 0 ? 0 : std::size_t(n) < sizeof text ? std::size_t(n) : sizeof text);
}
} // namespace detail

// "step 100: loss 0.123456 | loss scale 65536 | lr 0.001 | skipped 0 of 10 | 3.214 ms/step"
inline std::string progress_line(std::int64_t step, const StepTotals& t, double loss_scale,
                                 double lr) {
  const double n = t.steps > 0 ? double(t.steps) : 1.0;
  return detail::format_line(
      "step %lld: loss %.6f | loss scale %g | lr %.6g | skipped %lld of %lld | %.3f ms/step\n",
      static_cast<long long>(step), t.loss / n, loss_scale, lr, static_cast<long long>(t.skipped),
      static_cast<long long>(t.steps), t.seconds / n * 1e3);
}

// "step 100 time (ms, mean of 10 steps): forward 1.100 | backward 1.500 | step 0.600 (reduction
//  wait 0.100, norm 0.020, update 0.400) | gradient communication 0.900, 89% hidden"
inline std::string breakdown_line(std::int64_t step, const StepTotals& t) {
  const double n = t.steps > 0 ? double(t.steps) : 1.0;
  const double hidden =
      t.communication > 0 ? std::max(0.0, 1.0 - t.exposed / t.communication) * 100 : 0.0;
  return detail::format_line(
      "step %lld time (ms, mean of %lld steps): forward %.3f | backward %.3f | step %.3f "
      "(reduction wait %.3f, norm %.3f, update %.3f) | gradient communication %.3f, %.0f%% "
      "hidden\n",
      static_cast<long long>(step), static_cast<long long>(t.steps), t.forward / n * 1e3,
      t.backward / n * 1e3, t.step.total / n * 1e3, t.step.reduction_wait / n * 1e3,
      t.step.norm / n * 1e3, t.step.update / n * 1e3, t.communication / n * 1e3, hidden);
}

class StepLog {
 public:
  explicit StepLog(StepLogOptions options) : options_(options) {
    require(options.steps_per_print >= 0, "StepLog: steps_per_print must be 0 (never) or positive");
  }

  // Adds a step; returns the lines due after it (empty when none).
  std::string record(const StepRecord& r) {
    interval_.add(r);
    if (options_.steps_per_print <= 0 || r.step % options_.steps_per_print != 0) return {};
    std::string text = progress_line(r.step, interval_, r.result.loss_scale, r.lr);
    if (options_.wall_clock_breakdown) text += breakdown_line(r.step, interval_);
    interval_ = {};
    return text;
  }

  const StepLogOptions& options() const noexcept { return options_; }

 private:
  StepLogOptions options_;
  StepTotals interval_;
};

} // namespace zero
