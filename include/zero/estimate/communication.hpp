#pragma once
// The ZeRO paper's communication volume per training step and data-parallel rank (section 7):
// stages 0-2 move 2Ψ elements (an all-reduce of the gradients, or its halves: a reduce-scatter of
// the gradients and an all-gather of the updated parameters), stage 3 moves 3Ψ (the parameters
// are all-gathered again for the backward pass). Like the paper, this counts Ψ per collective
// rather than (N_d - 1) Ψ / N_d, and one step without gradient accumulation.

#include "zero/core/error.hpp"

#include <string>

namespace zero::estimate {

// The volume as a multiple of Ψ: 2 for stages 0-2, 3 for stage 3.
inline int communication_factor(int stage) {
  require(stage >= 0 && stage <= 3, "estimate: stage must be 0..3, got " + std::to_string(stage));
  return stage == 3 ? 3 : 2;
}

// Elements each rank sends (and receives) per step.
inline double communication_elements(int stage, double parameters) {
  return communication_factor(stage) * parameters;
}

} // namespace zero::estimate
