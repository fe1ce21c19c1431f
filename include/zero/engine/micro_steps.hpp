#pragma once
// MicroSteps: which layers' gradients have been handed over, in which micro-step of the current
// step (gradient accumulation), with the errors a training loop that skips or repeats a layer
// deserves instead of a reduction that waits forever.

#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace zero {

class MicroSteps {
 public:
  struct Arrival {
    bool opens_micro_step = false;   // the first layer handed over in this micro-step
    bool in_last_micro_step = false; // the step's last micro-step (gradient accumulation)
  };

  MicroSteps(const ShardLayout& layout, int accumulation)
      : accumulation_(accumulation), arrived_(layout.layer_count(), false),
        empty_(layout.layer_count(), false) {
    for (std::size_t l = 0; l < layout.layer_count(); ++l) {
      empty_[l] = layout.layer(l).numel == 0;
      if (!empty_[l]) ++expected_;
    }
  }

  int accumulation() const noexcept { return accumulation_; }
  int completed() const noexcept { return micro_; }

  // Records layer l's gradient of this micro-step; throws for a second hand-over or one past the
  // last micro-step. A layer without elements has no gradient: handing it over changes nothing
  // (nullopt), in whichever order it comes.
  std::optional<Arrival> arrive(std::size_t l) {
    if (empty_.at(l)) return std::nullopt;
    require(!arrived_[l],
            "grads_ready: layer " + std::to_string(l) + " was handed over twice in one micro-step");
    require(micro_ < accumulation_, "grads_ready: all " + std::to_string(accumulation_) +
                                        " micro-steps of this step are done; call step()");
    const Arrival arrival{count_ == 0, micro_ + 1 == accumulation_};
    arrived_[l] = true;
    if (++count_ == expected_) {
      ++micro_;
      count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
    }
    return arrival;
  }

  void require_complete() const {
    require(micro_ == accumulation_,
            "step() after " + std::to_string(micro_) + " of " + std::to_string(accumulation_) +
                " micro-steps (gradient_accumulation_steps); hand over every layer's gradient "
                "first");
  }
  void start_step() noexcept { micro_ = 0; }
  // No gradient of the next step handed over yet.
  bool at_step_start() const noexcept { return micro_ == 0 && count_ == 0; }
  // An error naming `what` (a call made between steps only) unless at_step_start().
  void require_at_step_start(const char* what) const {
    require(at_step_start(), std::string(what) + ": call it between steps (after step(), before "
                                                 "the next micro-step's gradients)");
  }

 private:
  int accumulation_;
  std::vector<bool> arrived_, empty_;
  std::size_t expected_ = 0, count_ = 0;
  int micro_ = 0;
};

} // namespace zero
