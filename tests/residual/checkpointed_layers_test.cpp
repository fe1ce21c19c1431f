// Activation checkpointing (residual/), at 1, 2 and 3 ranks:
// - any number of checkpoints gives the gradients of the run without, bit for bit, dropout
//   included when its random state goes through the hook (and not without: the test can fail);
// - activation memory is K inputs plus one segment, at most 2 sqrt(L) + 1 layers' worth;
// - the contiguous arena holds exactly the live peak and allocates nothing after the first step,
//   where one-by-one allocation of mixed lifetimes makes the heap grow;
// - through the engine at every stage, the weights of the run without checkpointing, and under
//   stage 3 every gather but the first of a step is foreseen once the order was recorded.

#include "zero/config/json.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/host_stream.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/engine/engine.hpp"
#include "zero/optim/adam.hpp"
#include "zero/residual/checkpointed_layers.hpp"

#include "comm_test.hpp"
#include "toy_layers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using zero::View;
using zero::testing::GeneratorState;
using zero::testing::ramp;
using zero::testing::ToyLayers;

struct Gradients {
  std::vector<std::vector<float>> weights;
  std::vector<float> input;
  std::vector<float> output;
  zero::CheckpointStats stats;
};

// Three steps of the toy loop with `checkpoints` kept inputs; the gradients of the last.
Gradients run_toy(std::size_t checkpoints, bool dropout, bool contiguous = false,
                  bool hook = true) {
  ToyLayers toy;
  std::mt19937 generator(7);
  if (dropout) toy.generator = &generator;
  std::vector<std::vector<float>> weights;
  for (std::size_t l = 0; l < toy.count; ++l)
    weights.push_back(ramp(toy.width * toy.width, 0.3f, float(l)));
  Gradients g;
  g.weights.resize(toy.count);
  toy.weights = [&](std::size_t l) { return weights[l].data(); };
  toy.gradients = [&](std::size_t l, const std::vector<float>& dw) { g.weights[l] = dw; };
  const zero::ActivationCheckpointing options{.number_checkpoints = checkpoints,
                                              .contiguous_memory = contiguous};
  auto run = [&](auto& loop) {
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> x = ramp(toy.activation_elements(), 1.0f, float(step));
      const View<const float> y = loop.forward(x);
      g.output.assign(y.begin(), y.end());
      g.input.assign(x.size(), 0.0f);
      loop.backward(ramp(y.size(), 0.5f, 2.0f), g.input);
    }
    g.stats = loop.stats();
  };
  if (hook && dropout) {
    zero::CheckpointedLayers<ToyLayers, GeneratorState> loop(toy, options,
                                                             GeneratorState{&generator});
    run(loop);
  } else {
    zero::CheckpointedLayers<ToyLayers> loop(toy, options);
    run(loop);
  }
  return g;
}

void expect_bitwise_equal(const Gradients& a, const Gradients& b, const std::string& what) {
  EXPECT_EQ(a.output, b.output) << what << ": forward's output";
  EXPECT_EQ(a.input, b.input) << what << ": the input's gradient";
  for (std::size_t l = 0; l < a.weights.size(); ++l)
    EXPECT_EQ(a.weights[l], b.weights[l]) << what << ": layer " << l << "'s weight gradient";
}

TEST(CheckpointedLayers, AnyNumberOfCheckpointsChangesNoNumber) {
  const Gradients plain = run_toy(0, false);
  EXPECT_EQ(plain.stats.recomputed_layers, 0u);
  for (std::size_t k : {1, 2, 3, 5, 7, 9}) {
    const Gradients checkpointed = run_toy(k, false);
    expect_bitwise_equal(plain, checkpointed, std::to_string(k) + " checkpoints");
    // The last segment is kept from forward; every other layer runs forward twice.
    const zero::CheckpointPlan plan(7, k);
    EXPECT_EQ(checkpointed.stats.recomputed_layers,
              7 - plan.segment(plan.segment_count() - 1).size());
  }
}

TEST(CheckpointedLayers, DropoutRecomputesTheSameMaskThroughTheHook) {
  const Gradients plain = run_toy(0, true);
  for (std::size_t k : {2, 3, 7})
    expect_bitwise_equal(plain, run_toy(k, true), std::to_string(k) + " checkpoints with dropout");
  // Without the hook the recomputation draws new masks: the gradients differ.
  const Gradients unhooked = run_toy(3, true, false, /*hook=*/false);
  EXPECT_NE(plain.weights[0], unhooked.weights[0]);
}

TEST(CheckpointedLayers, PlanCutsNearlyEqualSegments) {
  const zero::CheckpointPlan plan(10, 3);
  ASSERT_EQ(plan.segment_count(), 3u);
  EXPECT_EQ(plan.segment(0), (zero::Range{0, 4}));
  EXPECT_EQ(plan.segment(1), (zero::Range{4, 7}));
  EXPECT_EQ(plan.segment(2), (zero::Range{7, 10}));
  EXPECT_EQ(zero::CheckpointPlan(4, 9).segment_count(), 4u) << "at most one per layer";
  EXPECT_EQ(zero::CheckpointPlan(4, 0).segment_count(), 1u) << "off: one segment";
  EXPECT_EQ(zero::ActivationCheckpointing::sqrt_of(16), 4u);
  EXPECT_EQ(zero::ActivationCheckpointing::sqrt_of(1), 1u);
}

TEST(CheckpointedLayers, DeepSpeedsSectionSetsTheChoices) {
  using zero::ActivationCheckpointing;
  namespace config = zero::config;
  // No section: the loop is not checkpointed.
  EXPECT_EQ(ActivationCheckpointing::from_config(
                config::from_json_string("{}").activation_checkpointing, 16)
                .number_checkpoints,
            0u);
  // A section without number_checkpoints: about sqrt(layers).
  const auto sqrt_default = ActivationCheckpointing::from_config(
      config::from_json_string(R"({"activation_checkpointing": {"profile": true}})")
          .activation_checkpointing,
      16);
  EXPECT_EQ(sqrt_default.number_checkpoints, 4u);
  EXPECT_TRUE(sqrt_default.profile);
  const auto given = ActivationCheckpointing::from_config(
      config::from_json_string(
          R"({"activation_checkpointing": {"number_checkpoints": 3, "contiguous_memory_optimization": true,
              "synchronize_checkpoint_boundary": true}})")
          .activation_checkpointing,
      16);
  EXPECT_EQ(given.number_checkpoints, 3u);
  EXPECT_TRUE(given.contiguous_memory);
  EXPECT_TRUE(given.synchronize_boundary);
}

TEST(CheckpointedLayers, MemoryIsKInputsAndOneSegment) {
  // One layer's worth: its input and what it saves (3 activations of rows x width here).
  ToyLayers toy;
  const double layer_bytes = double(toy.activation_elements() * 3 * sizeof(float));
  const Gradients plain = run_toy(0, false);
  EXPECT_GE(double(plain.stats.peak_activation_bytes), 7 * layer_bytes);
  const std::size_t k = zero::ActivationCheckpointing::sqrt_of(7);
  const Gradients checkpointed = run_toy(k, false);
  // K kept inputs, one segment of ceil(7 / K) layers, the output and two gradient buffers.
  EXPECT_LE(double(checkpointed.stats.peak_activation_bytes),
            (2 * std::sqrt(7.0) + 1) * layer_bytes);
  EXPECT_LT(checkpointed.stats.peak_activation_bytes, plain.stats.peak_activation_bytes);
}

TEST(CheckpointedLayers, TheArenaHoldsTheLivePeakAndNothingMore) {
  const Gradients arena = run_toy(3, false, /*contiguous=*/true);
  expect_bitwise_equal(run_toy(3, false), arena, "contiguous memory");
  ToyLayers toy;
  std::vector<float> w = ramp(toy.width * toy.width, 0.3f, 0);
  toy.weights = [&](std::size_t) { return w.data(); };
  toy.gradients = [](std::size_t, const std::vector<float>&) {};
  zero::CheckpointedLayers loop(toy, {.number_checkpoints = 3, .contiguous_memory = true});
  const std::vector<float> x = ramp(toy.activation_elements(), 1, 0);
  std::vector<float> dx(x.size());
  auto step = [&] {
    const View<const float> y = loop.forward(x);
    const bool from_arena = loop.memory().in_arena(y.data());
    loop.backward(std::vector<float>(y.begin(), y.end()), dx);
    return from_arena;
  };
  EXPECT_FALSE(step()) << "the first step measures";
  EXPECT_EQ(loop.memory().reserved_bytes(), loop.memory().peak_live_bytes());
  // Later steps take everything from the arena, and it does not grow.
  for (int s = 0; s < 3; ++s)
    EXPECT_TRUE(step());
  EXPECT_EQ(loop.memory().growths(), 0u);
  EXPECT_EQ(loop.memory().reserved_bytes(), loop.memory().peak_live_bytes());
}

// ToyLayers on a device: over the host stream space that stands in for one, every layer's work is
// queued on the stream, its activations in the space's memory.
struct QueuedToyLayers {
  using Memory = zero::device_twin;
  ToyLayers& toy;
  zero::DeviceTwinSpace space;
  std::size_t extra_saved = 0; // asked for beyond what layers 3 and up save: a step needing more

  std::size_t layers() const { return toy.layers(); }
  std::size_t activation_elements() const { return toy.activation_elements(); }
  std::size_t saved_elements(std::size_t l) const {
    return toy.saved_elements(l) + (l >= 3 ? extra_saved : 0);
  }
  void forward(std::size_t l, View<const float, Memory> in, View<float, Memory> out,
               View<float, Memory> saved) {
    space.stream().enqueue("toy forward", [this, l, in, out, saved] {
      toy.forward(l, zero::detail::on_worker(in), zero::detail::on_worker(out),
                  zero::detail::on_worker(saved));
    });
  }
  void backward(std::size_t l, View<const float, Memory> in, View<const float, Memory> saved,
                View<const float, Memory> grad_out, View<float, Memory> grad_in) {
    space.stream().enqueue("toy backward", [this, l, in, saved, grad_out, grad_in] {
      toy.backward(l, zero::detail::on_worker(in), zero::detail::on_worker(saved),
                   zero::detail::on_worker(grad_out), zero::detail::on_worker(grad_in));
    });
  }
};

// Three steps of the toy loop on a stream space whose stream runs work only when something waits
// for it, with `options`; from step 1 on, layers 3 and up ask for `extra_saved` more floats. The
// gradients of the last step, the loop's figures, how often its arena grew, and whether backward
// returned with the stream's work still queued in every step after the first.
struct QueuedRun {
  Gradients gradients;
  std::size_t growths = 0;
  bool later_steps_returned_queued = true;
};
QueuedRun run_queued(const zero::ActivationCheckpointing& options, std::size_t extra_saved = 0) {
  ToyLayers toy;
  std::vector<std::vector<float>> weights;
  for (std::size_t l = 0; l < toy.count; ++l)
    weights.push_back(ramp(toy.width * toy.width, 0.3f, float(l)));
  QueuedRun run;
  Gradients& got = run.gradients;
  got.weights.resize(toy.count);
  toy.weights = [&](std::size_t l) { return weights[l].data(); };
  toy.gradients = [&](std::size_t l, const std::vector<float>& dw) { got.weights[l] = dw; };
  zero::HostStream stream("toy layers");
  stream.defer_until_waited();
  const zero::DeviceTwinSpace space(stream);
  QueuedToyLayers queued{toy, space};
  zero::CheckpointedLayers<QueuedToyLayers, zero::NoRandomState, zero::DeviceTwinSpace> loop(
      queued, options, {}, space);
  const std::size_t n = toy.activation_elements();
  zero::Buffer<float, zero::device_twin> x(n, zero::uninitialized), dy(n, zero::uninitialized),
      dx(n, zero::uninitialized);
  got.output.resize(n);
  got.input.resize(n);
  for (int step = 0; step < 3; ++step) {
    if (step == 1) queued.extra_saved = extra_saved;
    const std::vector<float> x_host = ramp(n, 1.0f, float(step)), dy_host = ramp(n, 0.5f, 2.0f);
    zero::copy(space, View<const float>(x_host), x.view());
    zero::copy(space, View<const float>(dy_host), dy.view());
    const View<const float, zero::device_twin> y = loop.forward(std::as_const(x).view());
    zero::copy(space, y, View<float>(got.output));
    loop.backward(std::as_const(dy).view(), dx.view());
    if (step > 0 && stream.deferred_tasks() == 0) run.later_steps_returned_queued = false;
    zero::copy(space, std::as_const(dx).view(), View<float>(got.input));
    space.fence();
  }
  got.stats = loop.stats();
  run.growths = loop.memory().growths();
  return run;
}

// Over a stream space the driver queues its copies beside the layers' work and waits for the
// stream only where it frees a buffer: any number of checkpoints gives the host loop's bits, the
// kept inputs in the space's memory or in pinned host memory, with the stream running its work
// only when something waits for it (so that a buffer freed under queued work is read after it was
// given back, which the sanitizer build catches), and with the arena a step after the first
// returns from backward with the stream's work still queued.
TEST(CheckpointedLayers, OnAStreamSpaceGivesTheHostLoopsBits) {
  struct Case {
    bool contiguous, in_host_memory;
  };
  for (const Case c : {Case{false, false}, Case{true, false}, Case{true, true}})
    for (std::size_t k : {0, 1, 3, 7}) {
      const std::string what = std::to_string(k) + " checkpoints" +
                               (c.contiguous ? ", contiguous" : "") +
                               (c.in_host_memory ? ", kept in host memory" : "");
      const QueuedRun run = run_queued({.number_checkpoints = k,
                                        .contiguous_memory = c.contiguous,
                                        .kept_inputs_in_host_memory = c.in_host_memory});
      expect_bitwise_equal(run_toy(k, false, c.contiguous), run.gradients, what);
      if (c.contiguous) {
        EXPECT_TRUE(run.later_steps_returned_queued) << what << ": backward waited for the stream";
      }
      // Every segment's input but the last's is kept, in one memory or the other.
      const std::size_t kept = (zero::CheckpointPlan(ToyLayers{}.count, k).segment_count() - 1) *
                               ToyLayers{}.activation_elements() * sizeof(float);
      const zero::CheckpointStats& stats = run.gradients.stats;
      EXPECT_EQ(stats.kept_input_bytes, c.in_host_memory ? 0 : kept) << what;
      EXPECT_EQ(stats.kept_input_host_bytes, c.in_host_memory ? kept : 0) << what;
    }
}

// A later step that needs more than the arena holds (here the layers of the later segments, 3-6 of
// 0-2, 3-4, 5-6, save more) grows it at the step's end. The first segment, backward's last, fits
// the old arena and ends without a wait, so the grown arena would free the old one under its
// queued backward unless the driver waits for the stream first: the sanitizer build reads freed
// memory otherwise. The gradients stay the host loop's.
TEST(CheckpointedLayers, OnAStreamSpaceAnArenaThatGrowsOutlivesItsQueuedWork) {
  const std::size_t more = 4 * ToyLayers{}.activation_elements();
  const QueuedRun run = run_queued({.number_checkpoints = 3, .contiguous_memory = true}, more);
  EXPECT_EQ(run.growths, 1u);
  expect_bitwise_equal(run_toy(3, false, true), run.gradients, "an arena that grew");
}

// A kept-input tier and partitioned activations move host memory: refused over a stream space;
// kept inputs moved to host memory from host memory are refused too.
TEST(CheckpointedLayers, OnAStreamSpaceATierOrAPartitionIsRefused) {
  ToyLayers toy;
  zero::HostStream stream("toy layers");
  const zero::DeviceTwinSpace space(stream);
  QueuedToyLayers queued{toy, space};
  struct NoTier : zero::KeptInputTier {
    void reserve(std::size_t, std::size_t) override {}
    void keep(std::size_t, View<const float>) override {}
    void prefetch(std::size_t) override {}
    void restore(std::size_t, View<float>) override {}
    void synchronize() override {}
    std::size_t buffer_bytes() const override { return 0; }
    std::size_t bytes_written() const override { return 0; }
    std::size_t bytes_read() const override { return 0; }
  } tier;
  // and kept inputs in host memory, over host memory, are refused as meaningless
  EXPECT_THROW(
      zero::CheckpointedLayers(toy, {.number_checkpoints = 2, .kept_inputs_in_host_memory = true}),
      zero::Error);
  using Loop =
      zero::CheckpointedLayers<QueuedToyLayers, zero::NoRandomState, zero::DeviceTwinSpace>;
  try {
    Loop loop(queued, {.number_checkpoints = 2, .kept_inputs = &tier}, {}, space);
    ADD_FAILURE() << "a kept-input tier over a stream space was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CheckpointedLayers over device_twin_stream: the kept "
                                         "inputs stay in its memory"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointedLayers, AnAbandonedStepLeavesTheLoopUsable) {
  // A layer throws in forward, or in backward; the next step starts afresh and gives what a fresh
  // loop gives, and nothing of the abandoned step stays live.
  for (bool in_backward : {false, true}) {
    ToyLayers toy;
    std::vector<float> w = ramp(toy.width * toy.width, 0.3f, 0);
    std::vector<std::vector<float>> grads(toy.count);
    bool armed = true;
    toy.weights = [&](std::size_t l) {
      if (armed && !in_backward && l == 4) {
        armed = false;
        throw std::runtime_error("a layer failed in forward");
      }
      return w.data();
    };
    toy.gradients = [&](std::size_t l, const std::vector<float>& dw) {
      if (armed && in_backward && l == 1) {
        armed = false;
        throw std::runtime_error("a layer failed in backward");
      }
      grads[l] = dw;
    };
    const std::vector<float> x = ramp(toy.activation_elements(), 1, 0);
    std::vector<float> dx(x.size());
    auto step = [&](auto& loop) {
      const View<const float> y = loop.forward(x);
      loop.backward(std::vector<float>(y.begin(), y.end()), dx);
    };
    zero::CheckpointedLayers loop(toy, {.number_checkpoints = 3, .contiguous_memory = true});
    EXPECT_THROW(step(loop), std::runtime_error);
    EXPECT_EQ(loop.memory().live_bytes(), 0u);
    step(loop);
    const std::vector<std::vector<float>> after_failure = grads;
    zero::CheckpointedLayers fresh(toy, {.number_checkpoints = 3});
    step(fresh);
    EXPECT_EQ(after_failure, grads) << (in_backward ? "backward" : "forward");
  }
}

TEST(CheckpointedLayers, MisuseIsNamed) {
  ToyLayers toy;
  std::vector<float> w = ramp(toy.width * toy.width, 0.3f, 0);
  toy.weights = [&](std::size_t) { return w.data(); };
  toy.gradients = [](std::size_t, const std::vector<float>&) {};
  zero::CheckpointedLayers loop(toy, {.number_checkpoints = 2});
  std::vector<float> wrong(5);
  EXPECT_THROW(
      {
        try {
          (void)loop.forward(wrong);
        } catch (const zero::Error& e) {
          EXPECT_NE(
              std::string(e.what()).find("forward's input has 5 elements, the layers take 36"),
              std::string::npos)
              << e.what();
          throw;
        }
      },
      zero::Error);
  EXPECT_THROW(loop.backward(wrong, {}), zero::Error);
}

// A tier that keeps the inputs in host vectors, recording what went through it.
struct VectorTier final : zero::KeptInputTier {
  std::vector<std::vector<float>> kept;
  std::size_t written = 0, read = 0;
  void reserve(std::size_t count, std::size_t elements) override {
    kept.assign(count, std::vector<float>(elements));
  }
  void keep(std::size_t i, View<const float> input) override {
    kept.at(i).assign(input.begin(), input.end());
    written += input.size() * sizeof(float);
  }
  void prefetch(std::size_t) override {}
  void restore(std::size_t i, View<float> into) override {
    std::copy(kept.at(i).begin(), kept.at(i).end(), into.begin());
    read += into.size() * sizeof(float);
  }
  void synchronize() override {}
  std::size_t buffer_bytes() const override { return 0; }
  std::size_t bytes_written() const override { return written; }
  std::size_t bytes_read() const override { return read; }
};

struct PartitionedRun {
  Gradients gradients;
  std::size_t tier_bytes_written = 0;
};

// Three steps of a toy loop of 35-element activations (no group size up to 4 divides them, so
// the last slice is padded) with dropout, every rank of the world running the same inputs as a
// tensor-parallel group does, its kept inputs partitioned over the world when asked, on `tier`
// when given. `shift` moves this rank's inputs (ranks that do not agree).
PartitionedRun run_partitioned(std::size_t checkpoints, bool partitioned, VectorTier* tier,
                               float shift = 0, bool contiguous = false,
                               float rank0_last_slice_shift = 0) {
  ToyLayers toy;
  toy.width = 7;
  toy.rows = 5;
  std::mt19937 generator(5);
  toy.generator = &generator;
  std::vector<std::vector<float>> weights;
  for (std::size_t l = 0; l < toy.count; ++l)
    weights.push_back(ramp(toy.width * toy.width, 0.4f, float(l)));
  PartitionedRun run;
  Gradients& g = run.gradients;
  g.weights.resize(toy.count);
  toy.weights = [&](std::size_t l) { return weights[l].data(); };
  toy.gradients = [&](std::size_t l, const std::vector<float>& dw) { g.weights[l] = dw; };
  zero::ActivationPartitionOver partition(zero::testing::world());
  zero::CheckpointedLayers<ToyLayers, GeneratorState> loop(
      toy,
      {.number_checkpoints = checkpoints,
       .contiguous_memory = contiguous,
       .kept_inputs = tier,
       .partition = partitioned ? &partition : nullptr},
      GeneratorState{&generator});
  for (int step = 0; step < 3; ++step) {
    std::vector<float> x = ramp(toy.activation_elements(), 1.0f, float(step) + shift);
    if (zero::testing::world().rank() == 0) { // rank 0 alone differs, in the last rank's slice
      const std::size_t ranks = std::size_t(zero::testing::world().size());
      const std::size_t slice = (x.size() + ranks - 1) / ranks;
      for (std::size_t i = (ranks - 1) * slice; i < x.size(); ++i)
        x[i] += rank0_last_slice_shift;
    }
    const View<const float> y = loop.forward(x);
    g.output.assign(y.begin(), y.end());
    g.input.assign(x.size(), 0.0f);
    loop.backward(ramp(y.size(), 0.5f, 2.0f), g.input);
  }
  g.stats = loop.stats();
  if (tier) run.tier_bytes_written = tier->written;
  return run;
}

TEST(CheckpointedLayers, PartitionedInputsChangeNoNumberAndKeepOneSliceEach) {
  const std::size_t ranks = std::size_t(zero::testing::world().size()), n = 35;
  const std::size_t slice = (n + ranks - 1) / ranks;
  for (std::size_t k : {1, 2, 3, 7}) {
    const std::string what = std::to_string(k) + " checkpoints over " + std::to_string(ranks);
    const std::size_t kept = zero::CheckpointPlan(7, k).segment_count() - 1;
    const PartitionedRun whole = run_partitioned(k, false, nullptr);
    const PartitionedRun sliced = run_partitioned(k, true, nullptr);
    expect_bitwise_equal(whole.gradients, sliced.gradients, what);
    EXPECT_EQ(whole.gradients.stats.kept_input_bytes, kept * n * sizeof(float)) << what;
    EXPECT_EQ(sliced.gradients.stats.kept_input_bytes, kept * slice * sizeof(float)) << what;
    EXPECT_EQ(sliced.gradients.stats.gathered_elements, kept * slice * ranks) << what;
    EXPECT_EQ(whole.gradients.stats.gathered_elements, 0u) << what;
    // The arena holds the slices as it holds whole inputs.
    expect_bitwise_equal(whole.gradients,
                         run_partitioned(k, true, nullptr, 0, /*contiguous=*/true).gradients,
                         what + " in the arena");
    // On a tier too: only the slices go there, and memory keeps none.
    VectorTier tier;
    const PartitionedRun on_tier = run_partitioned(k, true, &tier);
    expect_bitwise_equal(whole.gradients, on_tier.gradients, what + " on a tier");
    EXPECT_EQ(on_tier.gradients.stats.kept_input_bytes, 0u) << what;
    EXPECT_EQ(on_tier.tier_bytes_written, 3 * kept * slice * sizeof(float)) << what;
    EXPECT_EQ(on_tier.gradients.stats.gathered_elements, kept * slice * ranks) << what;
  }
}

TEST(CheckpointedLayers, PartitionedInputsThatDifferBetweenRanksAreNamed) {
  auto& world = zero::testing::world();
  if (world.size() == 1) { // one rank always agrees with itself
    EXPECT_NO_THROW(run_partitioned(3, true, nullptr, 0.25f));
    return;
  }
  // Every rank's inputs differ from every other's.
  EXPECT_THROW(
      {
        try {
          run_partitioned(3, true, nullptr, 0.25f * float(world.rank()));
        } catch (const zero::Error& e) {
          EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch);
          // Every rank's input differs from the gathered one, and every rank names them all.
          std::string all;
          for (int r = 0; r < world.size(); ++r)
            all += (r ? ", " : "") + std::to_string(r);
          EXPECT_NE(std::string(e.what()).find("gathered over the group differs from the one "
                                               "rank(s) " +
                                               all + " of the group had in forward"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      zero::Error);
}

TEST(CheckpointedLayers, InputsThatDifferOnOneRankStopEveryRank) {
  // Rank 0's input differs from the others' only inside the last rank's slice: where the other
  // ranks gather an input equal to their own, all of them still stop with rank 0, naming it,
  // instead of going on into a gather that rank 0 never joins.
  auto& world = zero::testing::world();
  if (world.size() == 1) { // rank 0 is its own last slice: nothing differs
    EXPECT_NO_THROW(run_partitioned(2, true, nullptr, 0, false, 0.5f));
    return;
  }
  try {
    run_partitioned(2, true, nullptr, 0, false, 0.5f); // one kept input: the loop's own
    ADD_FAILURE() << "rank " << world.rank() << " went on";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch);
    EXPECT_NE(std::string(e.what()).find("differs from the one rank(s) 0 of the group had"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointedLayers, DeepSpeedsPartitionKeysNeedAGroup) {
  using zero::ActivationCheckpointing;
  const auto section = [](const char* json) {
    return zero::config::from_json_string(json).activation_checkpointing;
  };
  const auto partition_keys = section(
      R"({"activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": true}})");
  // Without a group: refused, naming the key.
  for (const char* json : {R"({"activation_checkpointing": {"partition_activations": true}})",
                           R"({"activation_checkpointing": {"cpu_checkpointing": true}})"}) {
    try {
      (void)ActivationCheckpointing::from_config(section(json), 16);
      ADD_FAILURE() << json << " was accepted without a group";
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), zero::ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find(std::string(json).find("partition") != std::string::npos
                                               ? "partition_activations = true"
                                               : "cpu_checkpointing = true"),
                std::string::npos)
          << e.what();
    }
  }
  // With one: honoured. cpu_checkpointing alone keeps whole inputs (as DeepSpeed, which moves
  // only partitioned ones), in host memory where they are already.
  zero::ActivationPartitionOver group(zero::testing::world());
  EXPECT_EQ(ActivationCheckpointing::from_config(partition_keys, 16, &group).partition, &group);
  EXPECT_EQ(ActivationCheckpointing::from_config(
                section(R"({"activation_checkpointing": {"cpu_checkpointing": true}})"), 16, &group)
                .partition,
            nullptr);
  EXPECT_EQ(ActivationCheckpointing::from_config(section("{}"), 16, &group).partition, nullptr);
}

// The toy loop's weights through the engine: each layer's forward and backward acquire it, as a
// user's loop does, and backward hands its gradient over.
template <class Engine>
struct EngineToy : ToyLayers {
  Engine* engine = nullptr;
  const float* current = nullptr;
  void forward(std::size_t l, View<const float> in, View<float> out, View<float> saved) {
    const zero::LayerParameters p = engine->acquire(l);
    current = p.values<float>().data();
    ToyLayers::forward(l, in, out, saved);
  }
  void backward(std::size_t l, View<const float> in, View<const float> saved,
                View<const float> grad_out, View<float> grad_in) {
    const zero::LayerParameters p = engine->acquire(l);
    current = p.values<float>().data();
    ToyLayers::backward(l, in, saved, grad_out, grad_in);
  }
};

struct EngineRun {
  std::vector<std::vector<float>> weights;
  std::vector<zero::StepResult> steps;
};

template <class Plan>
EngineRun train_toy_through_engine(std::size_t checkpoints) {
  using Engine =
      zero::Engine<Plan, zero::MpiCommunicator, zero::host, zero::Adam, zero::StaticLossScaler>;
  auto& world = zero::testing::world();
  EngineToy<Engine> toy;
  std::vector<zero::ParameterSpec> specs;
  for (std::size_t l = 0; l < toy.count; ++l)
    specs.push_back(
        {"layer" + std::to_string(l), toy.width * toy.width, zero::DType::float32, int(l)});
  zero::EngineOptions options;
  options.deterministic = true;
  Engine engine(world, specs, zero::Adam({.lr = 0.01}), zero::StaticLossScaler{}, options);
  for (std::size_t l = 0; l < toy.count; ++l)
    engine.set_layer(l, ramp(toy.width * toy.width, 0.3f, float(l)));
  toy.engine = &engine;
  toy.weights = [&](std::size_t) { return toy.current; };
  toy.gradients = [&](std::size_t l, const std::vector<float>& dw) {
    zero::View<float> g = engine.template gradients<float>(l);
    std::copy(dw.begin(), dw.end(), g.begin());
    engine.grads_ready(l);
  };
  zero::CheckpointedLayers loop(toy, {.number_checkpoints = checkpoints});
  EngineRun run;
  for (int step = 0; step < 4; ++step) {
    // Each rank its own rows.
    const std::vector<float> x =
        ramp(toy.activation_elements(), 1.0f, float(step) + 0.5f * float(world.rank()));
    const View<const float> y = loop.forward(x);
    loop.backward(ramp(y.size(), 0.5f, float(world.rank())), {});
    run.steps.push_back(engine.step());
  }
  for (std::size_t l = 0; l < toy.count; ++l)
    run.weights.push_back(engine.get_layer(l));
  return run;
}

TEST(CheckpointedLayers, ThroughTheEngineEveryStageTrainsAsWithout) {
  const EngineRun plain = train_toy_through_engine<zero::Stage<0>>(0);
  EXPECT_NE(plain.weights[0], ramp(12 * 12, 0.3f, 0.0f)) << "the weights moved";
  for (std::size_t k : {2, 3}) {
    EXPECT_EQ(train_toy_through_engine<zero::Stage<0>>(k).weights, plain.weights) << k;
    EXPECT_EQ(train_toy_through_engine<zero::Stage<2>>(k).weights, plain.weights) << k;
    const EngineRun stage3 = train_toy_through_engine<zero::Stage<3>>(k);
    EXPECT_EQ(stage3.weights, plain.weights) << k;
    // The recomputation acquires layers out of forward's and backward's order; from the second
    // step on the gather follows the recorded order, and only the step's first layer waits.
    for (std::size_t s = 1; s < stage3.steps.size(); ++s) {
      EXPECT_EQ(stage3.steps[s].gathers.on_demand, 1u) << k << " checkpoints, step " << s;
      EXPECT_EQ(stage3.steps[s].gathers.order_changes, 0u);
    }
  }
}

} // namespace
