// The engine with its kernels queued on a stream (Placement<execute_on<HostStreamSpace>>), the CPU
// twin of the GPU engine's execution model: the stores queue the optimizer step and the gradient
// accumulation on the process's default host stream and wait for each layer's event before the
// host shares or reads what they wrote. At 1, 2 and 3 ranks:
// - stages 0, 1 and 3 give HostThreads' bits (bf16 runs: plain, accumulating locally
//   and clipped, 7-element buckets);
// - step() does not share a layer before its queued update has run: with the default stream held,
//   step() cannot return until the hold is released.

#include "training_scenario.hpp"

#include <zero/core/host_stream_space.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/stage/placement.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace {

using zero::DType;
using namespace zero::testing;

using OnAStream = zero::Placement<zero::execute_on<zero::HostStreamSpace>>;
// One compute type keeps the engine's instantiations (and CI's compile time) small.
using Bf16 = zero::ComputeTypes<zero::bfloat16>;

template <class Plan>
void expect_stream_engine_equals_host(const Scenario& run, const std::string& what) {
  const Outcome inline_ = train<Plan, zero::host, zero::Adam, zero::StaticLossScaler, Bf16>(run);
  const Outcome queued = train<Plan, OnAStream, zero::Adam, zero::StaticLossScaler, Bf16>(run);
  EXPECT_NE(queued.weights[2][0], initial_value(2, 0)) << what; // it trained
  expect_same_weights(inline_, queued, true, what);
}

TEST(StreamEngine, StagesGiveTheHostThreadsBits) {
  const Scenario runs[] = {
      {.dtype = DType::bfloat16},
      // stages 0 and 1 add micro-steps locally: the queued accumulate
      {.dtype = DType::bfloat16, .accumulation = 3, .clipping = 0.05, .deterministic = false},
      {.dtype = DType::bfloat16, .bucket = 7, .steps = 3},
  };
  for (const Scenario& run : runs) {
    const std::string what = "accumulation " + std::to_string(run.accumulation) + ", bucket " +
                             std::to_string(run.bucket);
    expect_stream_engine_equals_host<zero::Stage<0>>(run, what + ", stage 0");
    expect_stream_engine_equals_host<zero::Stage<1>>(run, what + ", stage 1");
    expect_stream_engine_equals_host<zero::Stage<3>>(run, what + ", stage 3");
  }
}

// Stage 1 shares each updated layer (an all-gather of the compute copy) as soon as its update has
// run. With the default stream held, the updates cannot run, so step() must not return; a store
// that shared a layer without waiting for its event would return (with stale weights) before the
// hold is released.
TEST(StreamEngine, StepWaitsForTheQueuedUpdates) {
  zero::EngineOptions options;
  options.compute_dtype = DType::bfloat16;
  zero::Engine<zero::Stage<1>, zero::MpiCommunicator, OnAStream, zero::Adam, zero::StaticLossScaler,
               Bf16>
      engine(world(), model(), zero::Adam({.lr = 0.01}), zero::StaticLossScaler{}, options);
  for (std::size_t l = engine.layers(); l-- > 0;) {
    auto weights = engine.acquire(l);
    write_gradients<zero::bfloat16>(engine.gradients<zero::bfloat16>(l),
                                    weights.values<zero::bfloat16>(), {}, world().rank(), 0, 0, l,
                                    world().size());
    engine.grads_ready(l);
  }
  std::atomic<bool> released{false};
  std::thread releaser([&, hold = zero::HostStreamSpace{}.stream().hold()]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = true;
    hold.release();
  });
  engine.step();
  EXPECT_TRUE(released) << "step() returned while its updates could not have run";
  releaser.join();
  EXPECT_NE(engine.get_layer(2)[0], 0.0f);
}

} // namespace
