#pragma once
// The learning-rate schedule a training loop steps: one of DeepSpeed's four schedules plus the
// step counter. As in DeepSpeed's engine, the counter moves only when the optimizer step was
// applied; a step skipped because the fp16 gradients overflowed leaves the learning rate where it
// was, on every rank alike (the overflow verdict is global).

#include "zero/schedule/one_cycle.hpp"
#include "zero/schedule/warmup.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace zero {

using LrSchedule = std::variant<WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle>;

// DeepSpeed's "type" names.
inline const char* schedule_name(const LrSchedule& schedule) noexcept {
  constexpr const char* names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle"};
  return names[schedule.index()];
}

// What happened to the optimizer step the schedule is told about.
enum class StepOutcome { applied, skipped_for_overflow };

struct AdamBetas {
  double beta1;
  double beta2;
};

class LrScheduler {
 public:
  // optimizer_lr is the learning rate the optimizer was built with: WarmupCosineLR scales it and
  // WarmupLR rises to it when warmup_max_lr is unset. last_batch_iteration resumes a schedule
  // (DeepSpeed's argument of the same name); -1 starts it.
  LrScheduler(LrSchedule schedule, double optimizer_lr, std::int64_t last_batch_iteration = -1)
      : schedule_(std::move(schedule)), optimizer_lr_(optimizer_lr),
        last_batch_iteration_(last_batch_iteration) {
    require(last_batch_iteration >= -1,
            "LrScheduler: last_batch_iteration must be -1 (start) or a step index, got " +
                std::to_string(last_batch_iteration));
    std::visit([](const auto& s) { s.validate(); }, schedule_);
  }

  // The learning rate for the next optimizer step.
  double lr() const {
    return std::visit(
        [&](const auto& s) -> double {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, WarmupLR> || std::is_same_v<S, WarmupCosineLR>)
            return s.lr(last_batch_iteration_, optimizer_lr_);
          else
            return s.lr(last_batch_iteration_);
        },
        schedule_);
  }

  // Adam's betas for the next step when the schedule drives them (OneCycle with cycle_momentum);
  // unset otherwise, and the optimizer keeps its own.
  std::optional<AdamBetas> betas() const {
    const auto* one_cycle = std::get_if<OneCycle>(&schedule_);
    if (!one_cycle) return std::nullopt;
    const std::optional<double> beta1 = one_cycle->momentum(last_batch_iteration_);
    if (!beta1) return std::nullopt;
    return AdamBetas{*beta1, OneCycle::cycled_beta2};
  }

  // Call once per optimizer step, after it.
  void step(StepOutcome outcome = StepOutcome::applied) {
    if (outcome == StepOutcome::applied) ++last_batch_iteration_;
  }

  // The index of the last applied step (-1 before the first), what a checkpoint stores.
  std::int64_t last_batch_iteration() const noexcept { return last_batch_iteration_; }
  // Resumes the schedule (from a checkpoint).
  void set_last_batch_iteration(std::int64_t iteration) {
    require(iteration >= -1, "LrScheduler: last_batch_iteration must be -1 or a step index, got " +
                                 std::to_string(iteration));
    last_batch_iteration_ = iteration;
  }
  const LrSchedule& schedule() const noexcept { return schedule_; }

 private:
  LrSchedule schedule_;
  double optimizer_lr_;
  std::int64_t last_batch_iteration_;
};

} // namespace zero
