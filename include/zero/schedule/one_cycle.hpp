#pragma once
// DeepSpeed's OneCycle schedule (1Cycle, Smith 2018): one cycle of the learning rate up from
// cycle_min_lr to cycle_max_lr and back, optionally in stairs, then an optional decay; Adam's
// beta1 ("momentum") cycles the opposite way. Parameter names, defaults and formulas are
// DeepSpeed's (deepspeed/runtime/lr_schedules.py), indexed like warmup.hpp by
// last_batch_iteration.

#include "zero/core/error.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace zero {

struct OneCycle {
  double cycle_min_lr = 0.0; // required in DeepSpeed's JSON
  double cycle_max_lr = 0.0; // required in DeepSpeed's JSON
  double decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;
  std::optional<double> cycle_second_step_size = std::nullopt; // unset: cycle_first_step_size
  std::int64_t cycle_first_stair_count = 0;                    // 0: no stairs
  std::optional<std::int64_t> cycle_second_stair_count =
      std::nullopt;                 // unset: cycle_first_stair_count
  std::int64_t decay_step_size = 0; // 0: no decay after the cycle
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;

  // DeepSpeed pins beta2 to this while it cycles beta1.
  static constexpr double cycled_beta2 = 0.99;

  friend bool operator==(const OneCycle&, const OneCycle&) = default;

  void validate() const {
    require(cycle_first_step_size > 0 && second_step_size() > 0,
            "OneCycle: cycle_first_step_size and cycle_second_step_size must be positive, got " +
                std::to_string(cycle_first_step_size) + " and " +
                std::to_string(second_step_size()));
    require(cycle_first_stair_count >= 0 && second_stair_count() >= 0,
            "OneCycle: stair counts must not be negative");
    require(decay_step_size >= 0, "OneCycle: decay_step_size must not be negative, got " +
                                      std::to_string(decay_step_size));
  }

  double second_step_size() const { return cycle_second_step_size.value_or(cycle_first_step_size); }
  std::int64_t second_stair_count() const {
    return cycle_second_stair_count.value_or(cycle_first_stair_count);
  }
  double total_size() const { return cycle_first_step_size + second_step_size(); }

  // Where in the cycle the next step is: 0 at cycle_min_lr, 1 at cycle_max_lr.
  double scale_factor(std::int64_t last_batch_iteration) const {
    const double total = total_size();
    const double step_ratio = cycle_first_step_size / total;
    const auto batch_iteration = static_cast<double>(last_batch_iteration + 1);
    const double cycle = std::floor(1.0 + batch_iteration / total);
    const double x = 1.0 + batch_iteration / total - cycle;
    const bool rising = x <= step_ratio;
    double scale = rising ? x / step_ratio : (x - 1.0) / (step_ratio - 1.0);
    const std::int64_t stairs = rising ? cycle_first_stair_count : second_stair_count();
    if (stairs > 0) {
      // From the integer offset in the cycle, as DeepSpeed does: the floating scale at a
      // half-cycle boundary can land just under a stair and would drop a whole stair.
      const double in_cycle = std::fmod(batch_iteration, total);
      const auto count = static_cast<double>(stairs);
      const double position = in_cycle <= cycle_first_step_size
                                  ? in_cycle * count / cycle_first_step_size
                                  : (total - in_cycle) * count / second_step_size();
      scale = std::floor(position) / count;
    }
    return scale;
  }

  double lr(std::int64_t last_batch_iteration) const {
    const double total = total_size();
    if (static_cast<double>(last_batch_iteration) < total)
      return cycle_min_lr + (cycle_max_lr - cycle_min_lr) * scale_factor(last_batch_iteration);
    if (decay_step_size == 0 || decay_lr_rate == 0.0) return cycle_min_lr;
    const double decay_interval =
        decay_batch_iteration(last_batch_iteration, total) / static_cast<double>(decay_step_size);
    return cycle_min_lr / (1.0 + decay_lr_rate * decay_interval);
  }

  // beta1 for the next step; unset when cycle_momentum is off. Before the first step DeepSpeed
  // leaves cycle_min_mom in the optimizer (its constructor writes it), not the formula's value.
  std::optional<double> momentum(std::int64_t last_batch_iteration) const {
    if (!cycle_momentum) return std::nullopt;
    if (last_batch_iteration < 0) return cycle_min_mom;
    const double total = total_size();
    if (static_cast<double>(last_batch_iteration) < total)
      return cycle_max_mom - (cycle_max_mom - cycle_min_mom) * scale_factor(last_batch_iteration);
    if (decay_step_size == 0 || decay_mom_rate == 0.0) return cycle_max_mom;
    const double decay_interval =
        decay_batch_iteration(last_batch_iteration, total) / static_cast<double>(decay_step_size);
    return cycle_max_mom * (1.0 + decay_mom_rate * decay_interval);
  }

 private:
  static double decay_batch_iteration(std::int64_t last_batch_iteration, double total) {
    return static_cast<double>(last_batch_iteration) - total + 1.0;
  }
};

} // namespace zero
