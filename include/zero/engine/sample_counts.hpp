#pragma once
// SampleCounts: how much each rank's gradient weighs in the step (EngineOptions::weigh_by_samples).
//
// The reduction averages what the ranks hand over. By default that is each rank's mean gradient,
// so each rank weighs the same: exact when the ranks have as many samples, off by the difference
// in shares otherwise (a batch of 25 over 2 ranks: 13 and 12). Weighed by samples, each rank hands
// over the sum of its samples' gradients and says how many it had; the step's factor is then the
// number of ranks over all ranks' samples of the step (every micro-step included), which turns
// the average of the sums into the mean over every sample. The counts cross in one small
// all-reduce at the step, with a flag that makes a rank that forgot them an error on every rank.

#include "zero/comm/reduce_op.hpp"
#include "zero/core/error.hpp"

#include <array>
#include <cstddef>
#include <string>

namespace zero {

class SampleCounts {
 public:
  explicit SampleCounts(bool weighed) noexcept : weighed_(weighed) {}

  // This rank's samples behind the gradients of the current step (added up over calls).
  void add(std::size_t samples) {
    require(weighed_, "add_samples: the engine weighs every rank's gradient the same; set "
                      "EngineOptions::weigh_by_samples to weigh them by their samples");
    samples_ += samples;
    counted_ = true;
  }

  // The factor from the reduced gradient to the step's gradient (before the loss scale): one over
  // the micro-steps, or, weighed, the ranks over all ranks' samples. Collective over `world`
  // (every rank) when weighed; the counts start again from zero.
  template <class World>
  double gradient_factor(World& world, int micro_steps) {
    if (!weighed_) return 1.0 / micro_steps;
    std::array<double, 2> totals{static_cast<double>(samples_), counted_ ? 0.0 : 1.0};
    samples_ = 0;
    counted_ = false;
    world.all_reduce(totals, ReduceOp::sum).wait();
    require_on_every_rank(totals[1] == 0.0,
                          "step(): with EngineOptions::weigh_by_samples every rank says how "
                          "many samples its gradients sum over (add_samples) in every step; " +
                              std::to_string(static_cast<long long>(totals[1])) +
                              " rank(s) did not");
    require_on_every_rank(totals[0] > 0.0,
                          "step(): no rank had samples in this step (add_samples)");
    return static_cast<double>(world.size()) / totals[0];
  }

 private:
  bool weighed_;
  std::size_t samples_ = 0;
  bool counted_ = false;
};

} // namespace zero
