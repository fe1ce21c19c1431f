#pragma once
// The host half that every optimizer has in common: its options, the learning rate (which a
// schedule changes between steps), and the count of applied steps, which bias corrections and
// momentum buffers depend on and a checkpoint restores. Adam, AdamW and SGD derive from it (CRTP)
// and add only their own option checks and the element-wise update of a given step.
//
// Derived provides `static constexpr std::string_view name` (the prefix of error messages) and
// `update_for_step(std::int64_t step) const`.

#include "zero/core/error.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace zero::detail {

template <class Derived, class Options>
class OptimizerBase {
 public:
  using options_type = Options;

  const Options& options() const noexcept { return options_; }
  double lr() const noexcept { return options_.lr; }
  void set_lr(double lr) {
    check_lr(lr);
    options_.lr = lr;
  }

  std::int64_t step_count() const noexcept { return step_count_; }
  void set_step_count(std::int64_t steps) {
    require(steps >= 0, message("the step count cannot be negative"));
    step_count_ = steps;
  }

  // Advances the step counter and returns this step's element-wise update.
  auto begin_step() {
    auto update = static_cast<const Derived&>(*this).update_for_step(step_count_ + 1);
    ++step_count_;
    return update;
  }

 protected:
  // Derived constructors check their options, the learning rate included, in their own order.
  explicit OptimizerBase(const Options& options) : options_(options) {}

  static std::string message(std::string_view text) {
    return std::string(Derived::name) + ": " + std::string(text);
  }

  static void check_lr(double lr) {
    require(lr >= 0.0 && std::isfinite(lr),
            message("the learning rate must be non-negative and finite, got ") +
                std::to_string(lr));
  }

  static void check_non_negative(double value, std::string_view option) {
    require(value >= 0.0 && std::isfinite(value),
            message(option) + " must be non-negative, got " + std::to_string(value));
  }

  static void check_step(std::int64_t step) {
    require(step >= 1, message("steps are numbered from 1"));
  }

 private:
  Options options_;
  std::int64_t step_count_ = 0;
};

} // namespace zero::detail
