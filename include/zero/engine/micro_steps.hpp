#pragma once
// MicroSteps: which layers' gradients have been handed over, in which micro-step of the current
// step (gradient accumulation), with the errors a training loop that skips or repeats a layer
// deserves instead of a reduction that waits forever.

#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace zero {

class MicroSteps {
 public:
  struct Arrival {
    bool first = false;    // the first layer of a micro-step
    bool boundary = false; // in the step's last micro-step
  };

  MicroSteps(const ShardLayout& layout, int accumulation)
      : accumulation_(accumulation), arrived_(layout.layer_count(), false) {
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      if (layout.layer(l).numel > 0) ++expected_;
    empty_.resize(layout.layer_count());
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      empty_[l] = layout.layer(l).numel == 0;
  }

  int accumulation() const noexcept { return accumulation_; }
  int completed() const noexcept { return micro_; }

  // Records layer l's gradient of this micro-step; throws for a second hand-over or one past the
  // last micro-step.
  Arrival arrive(std::size_t l) {
    require(!arrived_.at(l),
            "grads_ready: layer " + std::to_string(l) + " was handed over twice in one micro-step");
    require(micro_ < accumulation_, "grads_ready: all " + std::to_string(accumulation_) +
                                        " micro-steps of this step are done; call step()");
    const Arrival arrival{!started_, micro_ + 1 == accumulation_};
    started_ = true;
    arrived_[l] = true;
    if (!empty_[l]) ++count_;
    if (count_ == expected_) {
      ++micro_;
      count_ = 0;
      started_ = false;
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

 private:
  int accumulation_;
  std::vector<bool> arrived_, empty_;
  std::size_t expected_ = 0, count_ = 0;
  bool started_ = false;
  int micro_ = 0;
};

} // namespace zero
