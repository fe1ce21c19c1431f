// The optimizer step and the gradient checks over HostStreamSpace (optim/stream_step.hpp,
// precision/stream_checks.hpp): HostThreads' bits, queued instead of run; ordered after the
// gradients' producer by an event, and on stale gradients, every run, when that wait is dropped
// (StreamHold keeps the producer from running, no sleeps); results read only after an event; and
// argument mistakes that fail the call with nothing queued.

#include "step_reference.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/error.hpp>
#include <zero/core/execution_space.hpp>
#include <zero/core/half.hpp>
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/stream_space.hpp>
#include <zero/core/view.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/optim/stream_step.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/overflow.hpp>
#include <zero/precision/stream_checks.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace stream_step_test {

using zero::bfloat16;
using zero::half;
using zero::testing::Problem;

// One step of `p` through an execution space, with the compute copy when the problem has one.
template <class Exec, class Grad, class Copy, class U>
void step_through(const Exec& exec, Problem<Grad, Copy>& p, const U& update, float multiplier) {
  std::array<zero::View<float>, U::state_tensors> state;
  for (std::size_t k = 0; k < U::state_tensors; ++k)
    state[k] = zero::View<float>(p.state[k]);
  const zero::View<const Grad> grad(p.grad);
  if constexpr (Problem<Grad, Copy>::has_copy)
    fused_step(exec, update, zero::View<float>(p.master), state, grad, multiplier,
               zero::View<Copy>(p.copy));
  else
    fused_step(exec, update, zero::View<float>(p.master), state, grad, multiplier);
}

template <class Optimizer, class Grad, class Copy>
void expect_stream_step_equals_host_threads(Optimizer optimizer, std::size_t n, float multiplier) {
  zero::HostStream stream("step");
  const zero::HostStreamSpace space(stream);
  Problem<Grad, Copy> queued(n, Optimizer::state_tensors, 11 + n);
  Problem<Grad, Copy> inline_ = queued;
  Optimizer twin = optimizer;
  for (int step = 0; step < 2; ++step) { // two steps: the second reads the first's state
    step_through(space, queued, optimizer.begin_step(), multiplier);
    step_through(zero::HostThreads{}, inline_, twin.begin_step(), multiplier);
  }
  space.fence();
  zero::testing::expect_same_bits(queued, inline_, "n=" + std::to_string(n));
}

template <class Grad, class Copy>
void both_optimizers(std::size_t n, float multiplier) {
  expect_stream_step_equals_host_threads<zero::Adam, Grad, Copy>(
      zero::Adam({.lr = 0.01, .weight_decay = 0.01}), n, multiplier);
  expect_stream_step_equals_host_threads<zero::SGD, Grad, Copy>(
      zero::SGD({.lr = 0.1, .momentum = 0.9, .nesterov = true}), n, multiplier);
}

// 1 and 7: a scalar tail only; 65537: past the threading threshold, with a one-element tail.
constexpr std::size_t sizes[] = {1, 7, 65537};

TEST(StreamStep, SameBitsAsHostThreads) {
  for (std::size_t n : sizes) {
    both_optimizers<bfloat16, bfloat16>(n, 1.0f);
    both_optimizers<half, half>(n, 1.0f / 1024);
    both_optimizers<half, bfloat16>(n, 0.5f / 4096);
    both_optimizers<bfloat16, half>(n, 0.75f);
    both_optimizers<float, bfloat16>(n, 1.0f);
    both_optimizers<bfloat16, float>(n, 1.0f); // no compute copy
  }
}

// The bfloat16 gradients `widened` from float values on the producer's stream, then the step on
// the optimizer's stream; with `wait_for_gradients` false the event wait is dropped (the bug).
struct Pipeline {
  static constexpr std::size_t n = 257;
  std::vector<float> produced = Problem<float, float>(n, 0, 3).grad;
  std::vector<bfloat16> gradients = std::vector<bfloat16>(n); // zero until the producer runs
  Problem<bfloat16, bfloat16> states{n, 2, 5};

  void run(bool wait_for_gradients) {
    zero::HostStream producer_stream("gradients");
    zero::HostStream optimizer_stream("optimizer");
    const zero::HostStreamSpace producer(producer_stream);
    const zero::HostStreamSpace optimizer(optimizer_stream);
    zero::HostEvent gradients_ready;
    zero::HostEvent stepped;
    zero::StreamHold slow_producer = producer_stream.hold();
    convert(producer, zero::View<const float>(produced), zero::View<bfloat16>(gradients));
    record(producer, gradients_ready);
    if (wait_for_gradients) wait(optimizer, gradients_ready);
    std::array<zero::View<float>, 2> moments{zero::View<float>(states.state[0]),
                                             zero::View<float>(states.state[1])};
    fused_step(optimizer, zero::Adam({.lr = 0.01}).begin_step(), zero::View<float>(states.master),
               moments, zero::View<const bfloat16>(gradients), 1.0f,
               zero::View<bfloat16>(states.copy));
    record(optimizer, stepped);
    if (wait_for_gradients)
      EXPECT_FALSE(stepped.query()); // the step waits for the held producer
    else
      stepped.synchronize(); // the step runs at once, before the producer
    slow_producer.release();
    optimizer.fence();
    producer.fence();
  }
};

// The step on gradients already in place, inline: what the pipeline must give.
Problem<bfloat16, bfloat16> expected_after_step(const std::vector<bfloat16>& gradients) {
  Problem<bfloat16, bfloat16> p(Pipeline::n, 2, 5);
  p.grad = gradients;
  step_through(zero::HostThreads{}, p, zero::Adam({.lr = 0.01}).begin_step(), 1.0f);
  return p;
}

TEST(StreamStep, WaitsForTheGradientsProducer) {
  Pipeline pipeline;
  pipeline.run(true);
  zero::testing::expect_same_bits(pipeline.states, expected_after_step(pipeline.gradients),
                                  "with the wait");
}

TEST(StreamStep, DroppedWaitStepsOnStaleGradients) {
  Pipeline pipeline;
  pipeline.run(false);
  const std::vector<bfloat16> stale(Pipeline::n); // zeros: what the buffer held
  // The wrong result, and exactly the one stale gradients give: every run, not by chance.
  zero::testing::expect_same_bits(pipeline.states, expected_after_step(stale), "without the wait");
  const Problem<bfloat16, bfloat16> right = expected_after_step(pipeline.gradients);
  EXPECT_NE(pipeline.states.master, right.master);
}

template <class G>
std::vector<G> gradients_with(std::size_t n, std::size_t bad_at, float bad) {
  std::vector<G> g(Problem<G, float>(n, 0, 17 + n).grad);
  if (bad_at < n) g[bad_at] = zero::convert<G>(bad);
  return g;
}

template <class G>
void expect_checks_match_host(std::size_t n, std::size_t bad_at, float bad) {
  const std::string what = "n=" + std::to_string(n) + " bad at " + std::to_string(bad_at);
  const std::vector<G> first = gradients_with<G>(n, bad_at, bad);
  const std::vector<G> second = gradients_with<G>(n + 3, n + 3, 0.0f); // finite
  zero::HostStream stream("checks");
  const zero::HostStreamSpace space(stream);
  std::vector<int> found(1, 0);
  std::vector<double> sum(1, 0.0);
  zero::HostEvent checked;
  {
    zero::StreamHold hold = stream.hold();
    flag_nonfinite(space, zero::View<const G>(first), zero::View<int>(found));
    flag_nonfinite(space, zero::View<const G>(second), zero::View<int>(found)); // never clears
    accumulate_sum_of_squares(space, zero::View<const G>(first), zero::View<double>(sum));
    accumulate_sum_of_squares(space, zero::View<const G>(second), zero::View<double>(sum));
    record(space, checked);
    // Queued, not run: the slots hold what they held until the event has passed.
    EXPECT_FALSE(checked.query()) << what;
    EXPECT_EQ(found[0], 0) << what;
    EXPECT_EQ(sum[0], 0.0) << what;
  }
  checked.synchronize();
  const bool host_found = zero::has_overflow(zero::View<const G>(first)) ||
                          zero::has_overflow(zero::View<const G>(second));
  EXPECT_EQ(found[0] != 0, host_found) << what;
  EXPECT_EQ(found[0] != 0, bad_at < n) << what;
  // Added in queue order, as the slot was: the same bits for the same OpenMP thread count.
  const double host_sum = 0.0 + zero::sum_of_squares(zero::View<const G>(first)) +
                          zero::sum_of_squares(zero::View<const G>(second));
  if (bad_at < n)
    EXPECT_FALSE(std::isfinite(sum[0])) << what; // the sum is an overflow check too
  else
    EXPECT_EQ(sum[0], host_sum) << what;
}

TEST(StreamChecks, FindNonFiniteAsTheHostDoesAfterTheEvent) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : sizes) {
    expect_checks_match_host<float>(n, n, 0.0f); // clean
    expect_checks_match_host<half>(n, n, 0.0f);
    expect_checks_match_host<bfloat16>(n, n, 0.0f);
    expect_checks_match_host<float>(n, n - 1, nan); // the last element
    expect_checks_match_host<half>(n, n / 2, -inf);
    expect_checks_match_host<bfloat16>(n, 0, nan);
    expect_checks_match_host<half>(n, n - 1, 70000.0f); // past half's range: infinite
  }
}

template <class G>
void expect_unscale_matches_host(std::size_t n, std::size_t bad_at, float factor) {
  const std::string what = "n=" + std::to_string(n) + " bad at " + std::to_string(bad_at);
  std::vector<G> queued = gradients_with<G>(n, bad_at, std::numeric_limits<float>::infinity());
  std::vector<G> inline_ = queued;
  zero::HostStream stream("unscale");
  const zero::HostStreamSpace space(stream);
  std::vector<int> found(1, 0);
  unscale_and_flag_nonfinite(space, zero::View<G>(queued), factor, zero::View<int>(found));
  space.fence();
  const bool host_found = zero::unscale_and_check(zero::View<G>(inline_), factor);
  EXPECT_EQ(found[0] != 0, host_found) << what;
  zero::testing::expect_same_bits(queued, inline_, what);
}

TEST(StreamChecks, UnscaleInPlaceGivesTheHostsBits) {
  for (std::size_t n : sizes) {
    expect_unscale_matches_host<float>(n, n, 1.0f / 1024);
    expect_unscale_matches_host<float>(n, n / 3, 1.0f / 65536);
    expect_unscale_matches_host<half>(n, n, 1.0f / 8);
    expect_unscale_matches_host<bfloat16>(n, 0, 0.5f);
  }
}

// example-begin result-slot
// Written once over StreamSpace: the pattern the stores need. The checks write a slot in the
// space's memory, a copy brings it to pinned host memory, and the host reads it only after the
// event recorded behind that copy (on a GPU the slot is device memory; here both are host memory).
template <zero::StreamSpace Space, class G>
double checked_sum_of_squares(const Space& space,
                              zero::View<const G, typename Space::memory_space> grads,
                              zero::View<double, typename Space::memory_space> slot,
                              zero::View<double, zero::pinned_host> host_slot) {
  accumulate_sum_of_squares(space, grads, slot);
  copy(space, zero::View<const double, typename Space::memory_space>(slot), host_slot);
  typename Space::event_type read_back;
  record(space, read_back);
  read_back.synchronize();
  return host_slot[0];
}
// example-end result-slot

TEST(StreamChecks, ResultSlotCopiedBackOverStreamSpace) {
  zero::HostStream stream("norm");
  const zero::HostStreamSpace space(stream);
  const std::vector<half> grads = gradients_with<half>(1000, 1000, 0.0f);
  std::vector<double> slot(1, 0.0);
  zero::Buffer<double, zero::pinned_host> host_slot(1);
  const double sum =
      checked_sum_of_squares(space, zero::View<const half>(grads), zero::View<double>(slot),
                             zero::View<double, zero::pinned_host>(host_slot.data(), 1));
  EXPECT_EQ(sum, zero::sum_of_squares(zero::View<const half>(grads)));
}

TEST(StreamStep, SizeMismatchFailsTheCallWithNothingQueued) {
  zero::HostStream stream("step");
  const zero::HostStreamSpace space(stream);
  Problem<half, half> p(33, 2, 1);
  const Problem<half, half> before = p;
  const std::vector<half> short_grad(32);
  std::vector<half> short_copy(31);
  std::array<zero::View<float>, 2> moments{zero::View<float>(p.state[0]),
                                           zero::View<float>(p.state[1])};
  const auto update = zero::Adam().begin_step();
  zero::HostEvent after;
  {
    // Held: anything queued would still be waiting, so the checks cannot have run on the worker.
    zero::StreamHold hold = stream.hold();
    EXPECT_THROW(fused_step(space, update, zero::View<float>(p.master), moments,
                            zero::View<const half>(short_grad)),
                 zero::Error);
    EXPECT_THROW(fused_step(space, update, zero::View<float>(p.master), moments,
                            zero::View<const half>(p.grad), 1.0f, zero::View<half>(short_copy)),
                 zero::Error);
    std::array<zero::View<float>, 2> short_moment{zero::View<float>(p.state[0]).first(32),
                                                  moments[1]};
    EXPECT_THROW(fused_step(space, update, zero::View<float>(p.master), short_moment,
                            zero::View<const half>(p.grad)),
                 zero::Error);
    EXPECT_THROW(fused_step(space, update, zero::View<float>(p.master), moments,
                            zero::View<const half>(p.grad), std::numeric_limits<float>::infinity()),
                 zero::Error);
    std::vector<int> two_slots(2, 0);
    std::vector<double> no_slot;
    EXPECT_THROW(flag_nonfinite(space, zero::View<const half>(p.grad), zero::View<int>(two_slots)),
                 zero::Error);
    EXPECT_THROW(accumulate_sum_of_squares(space, zero::View<const half>(p.grad),
                                           zero::View<double>(no_slot)),
                 zero::Error);
    EXPECT_THROW(unscale_and_flag_nonfinite(space, zero::View<half>(p.grad),
                                            std::numeric_limits<float>::quiet_NaN(),
                                            zero::View<int>(two_slots).first(1)),
                 zero::Error);
    record(space, after);
  }
  try {
    after.synchronize();
    space.fence(); // nothing failed on the stream: no bad task was queued
  } catch (const zero::Error& e) {
    ADD_FAILURE() << "a failed call queued work: " << e.what();
  }
  zero::testing::expect_same_bits(p, before, "after refused calls"); // nothing ran
  zero::testing::expect_same_bits(p.grad, before.grad, "gradients after refused calls");
  try {
    fused_step(space, update, zero::View<float>(p.master), moments,
               zero::View<const half>(short_grad));
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the gradient has 32 elements"), std::string::npos)
        << e.what();
  }
}

} // namespace stream_step_test
