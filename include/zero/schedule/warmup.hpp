#pragma once
// DeepSpeed's warm-up learning-rate schedules, WarmupLR, WarmupDecayLR and WarmupCosineLR, with
// DeepSpeed's parameter names, defaults and formulas (deepspeed/runtime/lr_schedules.py).
//
// Every schedule is a pure function of DeepSpeed's `last_batch_iteration`: the index of the last
// optimizer step taken, -1 before the first one. The value it returns is the learning rate the
// next optimizer step uses; LrScheduler (lr_scheduler.hpp) keeps the counter.

#include "zero/core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>

namespace zero {

// How the learning rate rises during warm-up: "log" (DeepSpeed's default) or "linear".
enum class WarmupType { log, linear };

constexpr const char* to_string(WarmupType type) noexcept {
  return type == WarmupType::log ? "log" : "linear";
}

namespace detail {
// DeepSpeed raises the warm-up length to at least 2 steps, so that 1 / log(steps) is finite.
constexpr std::int64_t effective_warmup_steps(std::int64_t warmup_num_steps) noexcept {
  return std::max<std::int64_t>(2, warmup_num_steps);
}

// Share of the warm-up done at `iteration` (0 <= iteration < steps), written with DeepSpeed's
// operations in DeepSpeed's order so that the results match it to the last bit.
inline double warmup_gamma(WarmupType type, std::int64_t iteration, std::int64_t steps) {
  if (type == WarmupType::log) {
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(steps));
    return inverse_log_warm_up * std::log(static_cast<double>(iteration + 1));
  }
  return static_cast<double>(iteration) / static_cast<double>(steps);
}

inline void require_positive_warmup(std::int64_t warmup_num_steps, const char* schedule) {
  require(warmup_num_steps > 0, std::string(schedule) + ": warmup_num_steps must be a positive " +
                                    "integer, got " + std::to_string(warmup_num_steps));
}
} // namespace detail

// Rises from warmup_min_lr to warmup_max_lr over warmup_num_steps steps, then stays there.
struct WarmupLR {
  double warmup_min_lr = 0.0;
  // Unset: the optimizer's learning rate, as in current DeepSpeed (older releases used 0.001).
  std::optional<double> warmup_max_lr = std::nullopt;
  std::int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;

  void validate() const { detail::require_positive_warmup(warmup_num_steps, "WarmupLR"); }
  friend bool operator==(const WarmupLR&, const WarmupLR&) = default;

  double lr(std::int64_t last_batch_iteration, double optimizer_lr) const {
    if (last_batch_iteration < 0) return warmup_min_lr;
    const std::int64_t steps = detail::effective_warmup_steps(warmup_num_steps);
    const double gamma = last_batch_iteration < steps
                             ? detail::warmup_gamma(warmup_type, last_batch_iteration, steps)
                             : 1.0;
    const double delta_lr = warmup_max_lr.value_or(optimizer_lr) - warmup_min_lr;
    return warmup_min_lr + delta_lr * gamma;
  }
};

// WarmupLR, then a linear decay that reaches 0 at total_num_steps.
struct WarmupDecayLR {
  std::int64_t total_num_steps = 0; // required in DeepSpeed's JSON
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  std::int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;

  void validate() const { detail::require_positive_warmup(warmup_num_steps, "WarmupDecayLR"); }
  friend bool operator==(const WarmupDecayLR&, const WarmupDecayLR&) = default;

  double lr(std::int64_t last_batch_iteration) const {
    if (last_batch_iteration < 0) return warmup_min_lr;
    const std::int64_t steps = detail::effective_warmup_steps(warmup_num_steps);
    double gamma;
    if (last_batch_iteration < steps) {
      gamma = detail::warmup_gamma(warmup_type, last_batch_iteration, steps);
    } else {
      const double remaining = static_cast<double>(total_num_steps - last_batch_iteration);
      const double decay_steps = std::max(1.0, static_cast<double>(total_num_steps - steps));
      gamma = std::max(0.0, remaining / decay_steps);
    }
    return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma;
  }
};

// A ratio of the optimizer's learning rate: rises from warmup_min_ratio to 1 during warm-up, then
// follows half a cosine down to cos_min_ratio at total_num_steps and stays there.
struct WarmupCosineLR {
  std::int64_t total_num_steps = 0; // required in DeepSpeed's JSON
  double warmup_min_ratio = 0.0;
  std::int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::log;

  void validate() const { detail::require_positive_warmup(warmup_num_steps, "WarmupCosineLR"); }
  friend bool operator==(const WarmupCosineLR&, const WarmupCosineLR&) = default;

  double lr_ratio(std::int64_t last_batch_iteration) const {
    if (last_batch_iteration < 0) return 0.0;
    const std::int64_t steps = detail::effective_warmup_steps(warmup_num_steps);
    if (last_batch_iteration < steps) {
      const double ratio = detail::warmup_gamma(warmup_type, last_batch_iteration, steps);
      return warmup_min_ratio + ratio * (1.0 - warmup_min_ratio);
    }
    const double real_last_step = static_cast<double>(last_batch_iteration - steps + 1);
    const double real_total_steps =
        static_cast<double>(std::max<std::int64_t>(1, total_num_steps - steps));
    // Clamped, as DeepSpeed does since it stopped the ratio from climbing back after the end.
    const double progress = std::min(1.0, real_last_step / real_total_steps);
    const double ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    return std::max(0.0, cos_min_ratio + (1.0 - cos_min_ratio) * ratio);
  }

  double lr(std::int64_t last_batch_iteration, double optimizer_lr) const {
    return optimizer_lr * lr_ratio(last_batch_iteration);
  }
};

} // namespace zero
