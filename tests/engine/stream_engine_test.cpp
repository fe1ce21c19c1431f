// The engine with its kernels queued on a stream (Placement<execute_on<HostStreamSpace>>), the CPU
// twin of the GPU engine's execution model: the stores queue the optimizer step and the gradient
// accumulation on the process's default host stream and wait for each layer's event before the
// host shares or reads what they wrote. At 1, 2 and 3 ranks:
// - stages 0, 1 and 3 give HostThreads' bits (bf16 runs: plain, accumulating locally
//   and clipped, 7-element buckets), and so do stage 3 and a clipped stage 0 with per-parameter
//   chunks (images out of order: queued unpacking, and the norm's blocks packed on the stream);
// - so do they with the stream deferred (it runs work only once something waits for it): every
//   read, write and collective the engine orders after queued work waits for it, or reads stale
//   data, every run;
// - the optimizer store does not share a layer before its queued update has run (its stream
//   deferred: an update runs only once something waits for it).

#include "training_scenario.hpp"

#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/engine/engine.hpp>
#include <zero/engine/kept.hpp>
#include <zero/engine/optimizer_store.hpp>
#include <zero/optim/adam.hpp>
#include <zero/shard/flat_contiguous.hpp>
#include <zero/shard/per_parameter.hpp>
#include <zero/shard/verify.hpp>
#include <zero/stage/placement.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  // Stage 3 with per-parameter chunks (each gathered image unpacked on the stream) and small
  // layers kept gathered (refreshed after the stream's readers).
  using PerParameterStage3 =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::PerParameter>>;
  expect_stream_engine_equals_host<PerParameterStage3>(
      {.dtype = DType::bfloat16, .accumulation = 2, .persistence = 100},
      "stage 3, per-parameter chunks, small layers kept gathered");
  // Stage 0 with per-parameter chunks, clipped: each layer's block for the norm is packed out of
  // the reduced gradient on the stream, after its deliveries.
  using PerParameterStage0 = zero::ShardingPlan<zero::partition_with<zero::PerParameter>>;
  expect_stream_engine_equals_host<PerParameterStage0>(
      {.dtype = DType::bfloat16, .clipping = 0.05, .bucket = 7},
      "stage 0, per-parameter chunks, clipped");
}

// The default stream deferred while the engine trains over it: it runs work only once the engine
// waits for it, as late as a device could, so that a read, a write or a collective ordered after
// queued work without a wait for it sees stale data, every run: backward writing a gradient the
// queued accumulation or packing has not read yet (micro-steps added locally, stage 3's scratch),
// the host reading a stage 3 layer before its queued unpacking (per-parameter chunks), the norm
// read before its slots' copy. (A shard_within plan's average over the replicas is the gradient
// store's test's, tests/gpu/gradient_store_test.cpp.)
TEST(StreamEngine, ADeferredStreamGivesTheHostThreadsBits) {
  struct Deferred {
    Deferred() { zero::HostStreamSpace::default_stream().defer_until_waited(); }
    ~Deferred() { zero::HostStreamSpace::default_stream().end_deferral(); }
    Deferred(const Deferred&) = delete;
    Deferred& operator=(const Deferred&) = delete;
  } deferred;
  const Scenario locally{
      .dtype = DType::bfloat16, .accumulation = 3, .clipping = 0.05, .deterministic = false};
  expect_stream_engine_equals_host<zero::Stage<1>>(locally, "deferred, stage 1, added locally");
  expect_stream_engine_equals_host<zero::Stage<3>>(locally, "deferred, stage 3");
  using PerParameterStage3 =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::PerParameter>>;
  expect_stream_engine_equals_host<PerParameterStage3>(
      {.dtype = DType::bfloat16, .clipping = 0.05, .persistence = 100},
      "deferred, stage 3, per-parameter chunks");
}

// The optimizer store over a deferring stream (it runs an update only once something waits for
// it): done(l) comes only once layer l's queued update has run, so every done() finds the layer's
// new compute copy in place. A store that called done(l) without waiting for the layer's event
// finds the old one, every run. (The engine's step() cannot show this: it waits for the norm's
// queued sums before it queues any update.)
TEST(StreamEngine, OptimizerStoreSharesALayerOnlyAfterItsUpdateRan) {
  using Kept = zero::Kept<true, zero::FlatContiguous, zero::host>;
  const int rank = world().rank();
  const std::vector<zero::ParameterSpec> params = model();
  const zero::ModelLayout layout(zero::make_layout(world(), zero::FlatContiguous{}, params), rank,
                                 rank);
  zero::HostStream stream("optimizer");
  const zero::HostStreamSpace space(stream);
  zero::OptimizerStore<zero::Adam, Kept, zero::HostStreamSpace> queued(
      world(), layout, zero::EngineOptions{}, space);
  zero::OptimizerStore<zero::Adam, Kept, zero::HostThreads> inline_(world(), layout,
                                                                    zero::EngineOptions{}, {});
  const std::size_t layers = layout.layers();
  std::vector<std::vector<zero::bfloat16>> grads(layers), out(layers), expected(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<float> values(layout.sharded->layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = initial_value(l, i);
    queued.set_layer(l, values);
    inline_.set_layer(l, values);
    const std::size_t n = layout.my_block_size(l);
    for (std::size_t i = 0; i < n; ++i)
      grads[l].push_back(
          zero::bfloat16(gradient_value(values[i % values.size()], rank, 0, 0, l, i)));
    out[l].resize(n);
    expected[l].resize(n);
  }
  const auto gradients = [&](std::size_t l) { return zero::View<const zero::bfloat16>(grads[l]); };
  inline_.step(
      zero::Adam({.lr = 0.01}).begin_step(), 1.0f, gradients,
      [&](std::size_t l) { return zero::View<zero::bfloat16>(expected[l]); }, [](std::size_t) {});
  stream.defer_until_waited();
  std::size_t shared = 0;
  queued.step(
      zero::Adam({.lr = 0.01}).begin_step(), 1.0f, gradients,
      [&](std::size_t l) { return zero::View<zero::bfloat16>(out[l]); },
      [&](std::size_t l) {
        for (std::size_t i = 0; i < out[l].size(); ++i)
          ASSERT_EQ(out[l][i].bits, expected[l][i].bits)
              << "layer " << l << " element " << i << ": shared before its update ran";
        ++shared;
      });
  stream.end_deferral();
  EXPECT_EQ(shared, layers);
}

} // namespace
