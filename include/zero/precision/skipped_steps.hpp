#pragma once
// SkippedSteps: stops a run that skips step after step because its gradients are never finite.
//
// A dynamic loss scale recovers from an overflow by lowering the scale, and reports an error when
// it cannot go lower (raise_error_at_min_scale). A static scale cannot lower itself, and an input
// that is NaN overflows at any scale: such a run would skip every step forever while looking
// alive. Every rank sees the same outcome of each step (the overflow check is global), so every
// rank counts the same run of skips and fails at the same step, with the same message.

#include "zero/core/error.hpp"

#include <cstdint>
#include <string>

namespace zero {

class SkippedSteps {
 public:
  // `limit` consecutive skipped steps end the run; 0: no limit.
  explicit SkippedSteps(std::int64_t limit = 0) : limit_(limit) {
    require(limit >= 0, "max_consecutive_skipped_steps must be 0 (no limit) or positive, not " +
                            std::to_string(limit));
  }

  std::int64_t in_a_row() const noexcept { return in_a_row_; }

  // One step's outcome; `loss_scale` is the scale the step's gradients carried.
  void record(bool skipped, double loss_scale, bool dynamic_scale) {
    in_a_row_ = skipped ? in_a_row_ + 1 : 0;
    if (limit_ == 0 || in_a_row_ < limit_) return;
    fail(ErrorKind::numerical,
         std::to_string(in_a_row_) +
             " steps in a row were skipped because some rank's gradients were NaN or infinite "
             "(loss scale " +
             std::to_string(loss_scale) + (dynamic_scale ? ", dynamic" : ", static") +
             "). A run that overflows at every scale does not recover: check the inputs and the "
             "model for NaN/Inf, lower the learning rate, or raise max_consecutive_skipped_steps "
             "(0: no limit).");
  }

 private:
  std::int64_t limit_;
  std::int64_t in_a_row_ = 0;
};

} // namespace zero
