// ZeRO-Offload: the engine over a device stream space with the optimizer states on the host
// (Placement<execute_on<DeviceSpace>, optimizer_states_in<host>>, or <pinned_host>, or <nvme>:
// GPU -> pinned host -> NVMe). The parameters and gradients stay in device memory; the step stages
// each layer's reduced gradient to the host, runs the host store's update there and sends the new
// compute copy back (offload/offloaded_optimizer_store.hpp). Against the HostThreads engine given
// the same gradients (device_engine_scenario.hpp): the same weights bit for bit (the update is the
// host's own code), the same norms, a step skipped on every rank for an infinity on one without
// touching the host states; and the store alone against the host store it wraps, its every
// done(l) after layer l's copy back. Over the twin in CI at 1-3 ranks, and over CUDA (label gpu).

#include "device_engine_scenario.hpp"
#include "test_outcome.hpp"

#include <zero/config/json.hpp>
#include <zero/engine/kept.hpp>
#include <zero/engine/model_layout.hpp>
#include <zero/engine/optimizer_store.hpp>
#include <zero/offload/device_share.hpp>
#include <zero/offload/offloaded_optimizer_store.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/shard/flat_contiguous.hpp>
#include <zero/shard/verify.hpp>
#if ZERO_TEST_NVME
#include <zero/offload/nvme_stores.hpp>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace device_engine_test {

// example-begin offload-placement
// The compute copy and the gradients in device memory; master weights and moments in host
// memory, updated by the host's threads.
using Offloaded =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::optimizer_states_in<zero::host>>;
// example-end offload-placement
using OffloadedPinned =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::optimizer_states_in<zero::pinned_host>>;

TEST(Offload, Fp32GivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<float, Offloaded>(s, {.dtype = DType::float32}, "offloaded, ");
}

TEST(Offload, Bf16WithMicroStepsAndClippingGivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16, Offloaded>(
      s, {.dtype = DType::bfloat16, .accumulation = 2, .clipping = 0.05}, "offloaded, ");
  // The states in pinned memory (DeepSpeed's pin_memory): the same step, only the memory differs.
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16, OffloadedPinned>(
      s, {.dtype = DType::bfloat16}, "offloaded to pinned memory, bf16, stage 2");
}

// 8-bit moments live in the host store, which the offloaded one wraps: the host engine's bits (an
// engine whose states stay in device memory keeps them there: engine_test.cpp).
TEST(Offload, EightBitMomentsGiveTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16, Offloaded>(s, {.dtype = DType::bfloat16, .eight_bit_moments = true},
                                         "offloaded, 8-bit moments, ");
}

// Split masters behind a device: the host's step reads the weights' high parts from the compute
// copy it last sent (its staging), never from the device: the host engine's bits, with the
// 8-bit residual and 8-bit moments, and in pinned memory with the 16-bit one.
TEST(Offload, SplitMastersGiveTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16, Offloaded>(s,
                                         {.dtype = DType::bfloat16,
                                          .accumulation = 2,
                                          .clipping = 0.05,
                                          .eight_bit_moments = true,
                                          .master = zero::MasterStorage::split_8bit},
                                         "offloaded, split masters, ");
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16, OffloadedPinned>(
      s, {.dtype = DType::bfloat16, .master = zero::MasterStorage::split_16bit},
      "offloaded to pinned memory, 16-bit residual, stage 2");
}

#if ZERO_TEST_TWIN
// The compute stream held through each backward: the gradients' trip to the host must be ordered
// after their reduction, which is ordered after backward's copies.
TEST(Offload, HeldBackwardGivesTheHostEnginesBits) {
  StagedSetup s;
  constexpr std::size_t everything = 1 << 20;
  const Scenario held{.dtype = DType::bfloat16,
                      .steps = 2,
                      .bucket = everything,
                      .persistence = everything,
                      .held = true};
  expect_device_engine_equals_host<zero::Stage<1>, zero::bfloat16, Offloaded>(
      s, held, "offloaded, held, stage 1");
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16, Offloaded>(
      s, held, "offloaded, held, stage 3");
}
#endif

// An infinity in one rank's gradient skips the step on every rank: the host states are not
// touched (the weights after it are the host engine's, which skipped it too), and training goes on.
TEST(Offload, AnOverflowSkipsTheStepOnEveryRank) {
  StagedSetup s;
  const Scenario run{.dtype = DType::bfloat16, .overflow_step = 1};
  const Outcome host = train_on_host<zero::Stage<2>, zero::bfloat16>(run);
  ASSERT_EQ(host.applied, (std::vector<bool>{true, false, true}));
  const Outcome device = train_on_device<zero::Stage<2>, zero::bfloat16, Offloaded>(s, run);
  expect_same_norms(device, host, "overflow at step 1");
  expect_same_weights(device, host, "overflow at step 1");
}

// During backward each layer's reduced gradient leaves for the host once its last bucket landed
// (the step only waits for it): every layer, at every stage, with the last micro-step's buckets;
// none in a step skipped for an overflow. Where the plan averages the shards over replica groups
// after they landed (shard_within<1> beyond one rank), they leave at the step instead. The host
// engine's bits throughout.
template <class Plan>
void expect_gradients_offloaded_in_backward(StagedSetup& s, const Scenario& run,
                                            std::size_t per_step, const std::string& what) {
  SCOPED_TRACE(what);
  const Outcome host = train_on_host<Plan, zero::bfloat16>(run);
  const Outcome device = train_on_device<Plan, zero::bfloat16, Offloaded>(s, run);
  expect_same_norms(device, host, what);
  expect_same_weights(device, host, what);
  for (std::size_t k = 0; k < device.applied.size(); ++k)
    EXPECT_EQ(device.offloaded_in_backward[k], device.applied[k] ? per_step : 0)
        << what << ": step " << k << ", layers whose gradient left during backward";
}

TEST(Offload, GradientsLeaveDuringBackwardAtEveryStage) {
  StagedSetup s;
  constexpr std::size_t layers = 5; // model()'s
  const Scenario run{.dtype = DType::bfloat16, .accumulation = 2, .overflow_step = 1};
  expect_gradients_offloaded_in_backward<zero::Stage<0>>(s, run, layers, "stage 0");
  expect_gradients_offloaded_in_backward<zero::Stage<1>>(s, run, layers, "stage 1");
  expect_gradients_offloaded_in_backward<zero::Stage<2>>(s, run, layers, "stage 2");
  expect_gradients_offloaded_in_backward<zero::Stage<3>>(s, run, layers, "stage 3");
  using OwnGroups = zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                                       zero::shard_within<1>>;
  expect_gradients_offloaded_in_backward<OwnGroups>(
      s, {.dtype = DType::bfloat16}, world().size() == 1 ? layers : 0, "shard_within<1>");
}

// The speculative update: each layer's update starts once its gradient has reached the host,
// before the step knows the norm and the overflow check, and is undone from its snapshot when the
// step turns out skipped or clipped. The host engine's bits, whichever. Which steps roll back
// follows from the host run's norms (those skipped, those clipped); from the fourth step updated
// twice (clipped: a skipped step is not updated at all) speculation is off, and says so.
// Returns how many steps kept what was speculated.
template <class Plan, class Where = Offloaded>
std::size_t expect_speculation_gives_the_host_engines_bits(StagedSetup& s, const Scenario& run,
                                                           const std::string& what) {
  SCOPED_TRACE(what);
  constexpr std::size_t layers = 5; // model()'s
  const Outcome host = train_on_host<Plan, zero::bfloat16>(run);
  const Outcome device = train_on_device<Plan, zero::bfloat16, Where>(s, run);
  expect_same_norms(device, host, what);
  expect_same_weights(device, host, what);
  std::size_t twice = 0, kept = 0;
  for (std::size_t k = 0; k < host.applied.size(); ++k) {
    const zero::SpeculationReport& r = device.speculation[k];
    const std::string at = what + ": step " + std::to_string(k);
    if (twice >= 4) { // off: nothing speculated
      EXPECT_EQ(r.layers, 0u) << at;
      EXPECT_FALSE(r.rolled_back) << at;
      EXPECT_TRUE(r.off) << at;
      continue;
    }
    const bool clipped = run.clipping > 0 && host.norms[k] + 1e-6 > run.clipping;
    const bool rolled_back = !host.applied[k] || clipped;
    twice += host.applied[k] && clipped ? 1 : 0;
    EXPECT_EQ(r.layers, layers) << at << ", layers updated speculatively";
    EXPECT_EQ(r.rolled_back, rolled_back) << at << " (norm " << host.norms[k] << ")";
    EXPECT_EQ(r.off, twice >= 4) << at << ": " << r.why_off;
    kept += rolled_back ? 0 : 1;
  }
  return kept;
}

// Every stage with micro-steps, an overflow at step 1, and a threshold between the norms of a run
// that does not clip: some steps clip (and roll back), others keep what was speculated.
TEST(Offload, SpeculativeUpdateGivesTheHostEnginesBits) {
  StagedSetup s;
  Scenario run{.dtype = DType::bfloat16,
               .accumulation = 2,
               .steps = 5,
               .overflow_step = 1,
               .speculative = true};
  std::vector<double> norms;
  for (double norm : train_on_host<zero::Stage<2>, zero::bfloat16>(run).norms)
    if (std::isfinite(norm)) norms.push_back(norm);
  std::sort(norms.begin(), norms.end());
  run.clipping = (norms[norms.size() / 2 - 1] + norms[norms.size() / 2]) / 2;
  const std::size_t kept =
      expect_speculation_gives_the_host_engines_bits<zero::Stage<0>>(s, run, "stage 0") +
      expect_speculation_gives_the_host_engines_bits<zero::Stage<1>>(s, run, "stage 1") +
      expect_speculation_gives_the_host_engines_bits<zero::Stage<2>>(s, run, "stage 2") +
      expect_speculation_gives_the_host_engines_bits<zero::Stage<3>>(s, run, "stage 3");
  EXPECT_GT(kept, 0u) << "no step kept its speculative update: the threshold clips every step";
  // Clipped on every step, past the fourth rollback: off, saying why, and still the host's bits.
  Scenario always_clipped = run;
  always_clipped.clipping = 0.05;
  always_clipped.steps = 6;
  expect_speculation_gives_the_host_engines_bits<zero::Stage<3>>(s, always_clipped,
                                                                 "always clipped, stage 3");
}

// The snapshot holds every kind of state the host store keeps: 8-bit moments (codes and scales)
// and split masters (residuals, and the staged compute copy that holds their high parts), in
// pinned memory too; and the compute stream deferred through backward (the twin): a layer is
// updated only once its gradient has arrived. Each kept (an overflow at step 1 rolled back) and
// rolled back on every step (always clipped).
TEST(Offload, SpeculativeUpdateUndoesEveryKindOfState) {
  StagedSetup s;
  const auto both_ways = [&]<class Plan, class Where>(Scenario run, const std::string& what) {
    run.speculative = true;
    run.steps = 4;
    run.overflow_step = 1;
    const auto kept = [&](const Scenario& r, const std::string& w) {
      return expect_speculation_gives_the_host_engines_bits<Plan, Where>(s, r, w);
    };
    EXPECT_EQ(kept(run, what), 3u) << what;
    run.steps = 3;
    run.overflow_step = -1;
    run.clipping = 0.05;
    EXPECT_EQ(kept(run, what + ", clipped"), 0u) << what;
  };
  both_ways.operator()<zero::Stage<2>, Offloaded>({.dtype = DType::bfloat16,
                                                   .accumulation = 2,
                                                   .eight_bit_moments = true,
                                                   .master = zero::MasterStorage::split_8bit},
                                                  "8-bit moments, 8-bit residuals, stage 2");
  both_ways.operator()<zero::Stage<3>, OffloadedPinned>(
      {.dtype = DType::bfloat16, .master = zero::MasterStorage::split_16bit},
      "pinned, 16-bit residuals, stage 3");
#if ZERO_TEST_TWIN
  constexpr std::size_t everything = 1 << 20;
  both_ways.operator()<zero::Stage<1>, Offloaded>(
      {.dtype = DType::bfloat16, .bucket = everything, .persistence = everything, .held = true},
      "held, stage 1");
#endif
}

// Reading the weights between the last backward and its step (get_layer) sees the states from
// before the step: what was speculated is undone first (not counted as a rollback), and the step
// then updates as without speculation: the host engine's bits.
TEST(Offload, ReadingTheWeightsMidStepUndoesTheSpeculation) {
  StagedSetup s;
  const Scenario run{.dtype = DType::bfloat16, .steps = 3, .speculative = true};
  const Outcome host = train_on_host<zero::Stage<2>, zero::bfloat16>(run);
  DeviceEngine<zero::Stage<2>, zero::bfloat16, Offloaded> engine(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  set_weights(engine);
  Scenario one_step = run;
  one_step.steps = 1;
  const Outcome host_after_one = train_on_host<zero::Stage<2>, zero::bfloat16>(one_step);
  Outcome device;
  device_steps<zero::bfloat16>(s, engine, run, 0, run.steps, device, [&](int step) {
    if (step != 1) return;
    const std::vector<float> now = engine.get_layer(2); // the states after step 0 only
    ASSERT_EQ(now.size(), host_after_one.weights[2].size());
    for (std::size_t i = 0; i < now.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(now[i]),
                std::bit_cast<std::uint32_t>(host_after_one.weights[2][i]))
          << "element " << i << " read between backward and step: not the weights after step 0";
  });
  device = finish(engine, std::move(device));
  expect_same_norms(device, host, "read mid-step");
  expect_same_weights(device, host, "read mid-step");
  EXPECT_EQ(device.speculation[0].layers, 5u);
  EXPECT_EQ(device.speculation[1].layers, 0u) << "undone by the read";
  EXPECT_FALSE(device.speculation[1].rolled_back);
  EXPECT_EQ(device.speculation[2].layers, 5u);
}

// build() must throw a zero::Error whose message holds `expected`.
template <class Build>
void refused(Build&& build, const std::string& expected, const std::string& what) {
  try {
    build();
    ADD_FAILURE() << what << ": accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << what << ": " << e.what();
  }
}
// A stage 2 engine of `options` over `Where`, stepping `Opt`: what the refusals build.
template <class Where, class Opt = zero::Adam>
void build_engine(StagedSetup& s, const zero::EngineOptions& options) {
  DeviceEngine<zero::Stage<2>, zero::bfloat16, Where, Opt> engine(
      world(), s.comm, model(), make_optimizer<Opt>(), zero::StaticLossScaler{}, options,
      s.compute());
}
#if ZERO_TEST_NVME
using OffloadedToNvme =
    zero::Placement<zero::execute_on<DeviceSpace>, zero::optimizer_states_in<zero::nvme>>;
#endif

// What the speculative update cannot do is refused when the engine is built, naming the option:
// without offloaded states, with LAMB, with the delayed update, with weigh_by_samples, and on the
// NVMe tier; a config's offload_optimizer.super_offload asks for it.
TEST(Offload, SpeculationIsRefusedWhereItCannotRun) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16, .speculative = true});
  refused([&] { build_engine<OnTheDevice>(s, options); },
          "speculative_update: the speculative update runs the CPU's update during the device's "
          "backward; it needs the optimizer states offloaded",
          "states in device memory");
  refused([&] { build_engine<Offloaded, zero::Lamb>(s, options); },
          "speculative_update: LAMB's trust ratios", "LAMB");
  for (const bool weigh : {false, true}) {
    zero::EngineOptions both = options;
    (weigh ? both.weigh_by_samples : both.speculative_update) = true;
    if (!weigh) both.delayed_parameter_update_after = 2;
    refused([&] { build_engine<Offloaded>(s, both); },
            weigh ? "speculative_update needs the gradient multiplier before the step"
                  : "speculative_update starts each step's update before its step",
            weigh ? "weigh_by_samples" : "delayed update");
  }
#if ZERO_TEST_NVME
  SharedDir swap("zero-offload-speculative-");
  zero::EngineOptions on_nvme =
      options_for({.dtype = DType::bfloat16, .nvme_path = swap.path, .speculative = true});
  refused([&] { build_engine<OffloadedToNvme>(s, on_nvme); },
          "speculative_update updates layer by layer in host memory", "NVMe");
#endif
  const zero::config::Config config = zero::config::from_json_string(R"({"zero_optimization":
      {"stage": 2, "offload_optimizer": {"device": "cpu", "super_offload": true}}})");
  EXPECT_TRUE(zero::EngineOptions::from_config(config).speculative_update);
  try {
    (void)zero::config::from_json_string(R"({"zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "super_offload": true}}})");
    ADD_FAILURE() << "super_offload with device nvme was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_optimizer.super_offload"), std::string::npos)
        << e.what();
  }
}

// The CPU/GPU split (offload_ratio): the host updates its share of each layer's block, the device
// the rest, in device memory, in the same step: the host engine's bits. Each applied step reports
// both sides' times, the host's share and a ratio between 0 and 1; a skipped one reports nothing.
template <class Plan, class Where = Offloaded>
void expect_split_gives_the_host_engines_bits(StagedSetup& s, const Scenario& run,
                                              const std::string& what) {
  SCOPED_TRACE(what);
  const Outcome host = train_on_host<Plan, zero::bfloat16>(run);
  const Outcome device = train_on_device<Plan, zero::bfloat16, Where>(s, run);
  expect_same_norms(device, host, what);
  expect_same_weights(device, host, what);
  for (std::size_t k = 0; k < host.applied.size(); ++k) {
    const zero::SplitReport& r = device.split[k];
    const std::string at = what + ": step " + std::to_string(k);
    if (!host.applied[k]) {
      EXPECT_EQ(r.host_share, 0) << at << " was skipped";
      continue;
    }
    // The cuts fall on multiples of 16 elements: within a tenth on this model's small blocks.
    EXPECT_NEAR(r.host_share, run.offload_ratio, 0.1) << at;
    EXPECT_GT(r.host_seconds, 0) << at;
    EXPECT_GT(r.device_seconds, 0) << at;
    EXPECT_GT(r.suggested_ratio, 0) << at;
    EXPECT_LT(r.suggested_ratio, 1) << at;
  }
}

// Every stage with micro-steps, an overflow and clipping; speculation over the host's share (kept
// and rolled back); pinned memory; the compute stream deferred through the step (the twin).
TEST(Offload, SplitStepGivesTheHostEnginesBits) {
  StagedSetup s;
  const Scenario run{.dtype = DType::bfloat16,
                     .accumulation = 2,
                     .clipping = 0.05,
                     .overflow_step = 1,
                     .offload_ratio = 0.5};
  expect_split_gives_the_host_engines_bits<zero::Stage<0>>(s, run, "half, stage 0");
  expect_split_gives_the_host_engines_bits<zero::Stage<1>>(s, run, "half, stage 1");
  expect_split_gives_the_host_engines_bits<zero::Stage<2>>(s, run, "half, stage 2");
  expect_split_gives_the_host_engines_bits<zero::Stage<3>>(s, run, "half, stage 3");
  Scenario speculative = run;
  speculative.clipping = 0;
  speculative.speculative = true;
  speculative.offload_ratio = 0.3;
  expect_split_gives_the_host_engines_bits<zero::Stage<3>, OffloadedPinned>(
      s, speculative, "0.3, speculative, pinned, stage 3");
  speculative.clipping = 0.05;
  expect_split_gives_the_host_engines_bits<zero::Stage<2>>(s, speculative,
                                                           "0.3, speculative, clipped, stage 2");
#if ZERO_TEST_TWIN
  constexpr std::size_t everything = 1 << 20;
  expect_split_gives_the_host_engines_bits<zero::Stage<1>>(s,
                                                           {.dtype = DType::bfloat16,
                                                            .bucket = everything,
                                                            .persistence = everything,
                                                            .held = true,
                                                            .offload_ratio = 0.8},
                                                           "0.8, held, stage 1");
#endif
}

// DeviceShare alone, on blocks whose parts are not multiples of 16 elements (its buffers pad each
// layer's part, the blocks do not): two steps of its part of every block give the host step's bits
// over the same elements, each layer's compute copy there by the time it is handed on.
TEST(Offload, DeviceShareUpdatesItsPartOfEveryBlock) {
  using T = zero::bfloat16;
  StagedSetup s;
  const std::vector<std::size_t> blocks{6, 37, 0, 100, 24};
  zero::DeviceShare<DeviceSpace> share(blocks, 0.5, 3, s.compute());
  std::vector<std::vector<T>> grads(blocks.size());
  std::vector<zero::Buffer<T, DeviceMemory>> device_grads, device_out;
  // The host's reference of each device part: masters and moments from zero, as the share's.
  std::vector<std::vector<float>> master(blocks.size()), m(blocks.size()), v(blocks.size());
  std::vector<std::vector<T>> expected(blocks.size());
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    for (std::size_t i = 0; i < blocks[l]; ++i)
      grads[l].push_back(T(static_cast<float>((i * 5 + l * 3) % 19) * 0.1f - 0.9f));
    device_grads.push_back(s.upload(grads[l]));
    device_out.emplace_back(blocks[l]);
    const std::size_t n = blocks[l] - share.cut(l);
    master[l].assign(n, 0.0f);
    m[l].assign(n, 0.0f);
    v[l].assign(n, 0.0f);
    expected[l].resize(n);
  }
  zero::Adam host_adam = adam(), device_adam = adam();
  for (int step = 0; step < 2; ++step) {
    const auto update = host_adam.begin_step();
    for (std::size_t l = 0; l < blocks.size(); ++l)
      zero::fused_step(update, zero::View<float>(master[l]),
                       {zero::View<float>(m[l]), zero::View<float>(v[l])},
                       zero::View<const T>(grads[l]).subview(share.cut(l), master[l].size()),
                       1.0f / 8, zero::View<T>(expected[l]));
    auto grads_of = [&](std::size_t l) { return std::as_const(device_grads[l]).view(); };
    auto out = [&](std::size_t l) { return device_out[l].view(); };
    share.update(device_adam.begin_step(), 1.0f / 8, grads_of, out);
    for (std::size_t l = 0; l < blocks.size(); ++l) {
      share.order_layer(l);
      const std::vector<T> got = s.read(device_out[l]);
      for (std::size_t i = 0; i < expected[l].size(); ++i)
        ASSERT_EQ(got[share.cut(l) + i].bits, expected[l][i].bits)
            << "step " << step << ", layer " << l << " element " << share.cut(l) + i;
    }
    const zero::SplitReport report = share.finish();
    EXPECT_NEAR(report.host_share, share.host_share(), 0);
  }
}

// The device's share is read and written with the host store's states: get_layer between steps,
// a checkpoint saved by a split engine and loaded by the host engine (the moments too: the step
// after loading gives its bits), and one loaded by a split engine of another stage and ratio.
TEST(Offload, SplitStatesCheckpointAsTheHostEngines) {
  StagedSetup s;
  SharedDir dir("zero-offload-split-");
  const Scenario run{.dtype = DType::bfloat16, .offload_ratio = 0.5};
  const Outcome after_two =
      train_on_host<zero::Stage<1>, zero::bfloat16>({.dtype = DType::bfloat16, .steps = 2});
  const Outcome after_three =
      train_on_host<zero::Stage<1>, zero::bfloat16>({.dtype = DType::bfloat16, .steps = 3});
  DeviceEngine<zero::Stage<1>, zero::bfloat16, Offloaded> saved(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  set_weights(saved);
  // Adam's master weights and two moments of every block's device part, 16 elements a layer.
  std::size_t device_part = 0;
  const zero::ModelLayout layout(zero::make_layout(world(), zero::FlatContiguous{}, model()),
                                 world().rank(), world().rank());
  std::vector<std::size_t> blocks;
  for (std::size_t l = 0; l < layout.layers(); ++l)
    blocks.push_back(layout.my_block_size(l));
  const std::vector<std::size_t> cuts = zero::DeviceShare<DeviceSpace>::host_part(blocks, 0.5);
  for (std::size_t l = 0; l < blocks.size(); ++l)
    device_part += (blocks[l] - cuts[l] + 15) / 16 * 16;
  EXPECT_GT(device_part, 0u);
  EXPECT_EQ(saved.memory().optimizer_on_device, device_part * 3 * sizeof(float));
  Outcome ignored;
  device_steps<zero::bfloat16>(s, saved, run, 0, 2, ignored);
  saved.save_checkpoint(dir.path, "split");
  expect_same_weights(finish(saved, {}), after_two, "read between steps");

  // Each takes the third step from the checkpoint: an uninterrupted run's bits, moments included.
  auto host = host_engine<zero::Stage<1>, zero::bfloat16>(run);
  host.load_checkpoint(dir.path, "split");
  Outcome on_host;
  host_steps<zero::bfloat16>(host, run, 2, 1, on_host);
  expect_same_weights(finish(host, {}), after_three, "the host engine, a step after loading");
  Scenario other = run;
  other.offload_ratio = 0.3;
  DeviceEngine<zero::Stage<3>, zero::bfloat16, Offloaded> loaded(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(other), s.compute());
  loaded.load_checkpoint(dir.path, "split");
  Outcome on_device;
  device_steps<zero::bfloat16>(s, loaded, other, 2, 1, on_device);
  expect_same_weights(finish(loaded, {}), after_three,
                      "a split stage 3 engine, a step after loading");
}

// What the split cannot do is refused when the engine is built, naming the option: without
// offloaded states, with LAMB, with 8-bit moments or split masters, with the delayed update, on
// the NVMe tier, and a ratio outside (0, 1]; a config's offload_optimizer.ratio asks for it at
// stage 3.
TEST(Offload, SplitIsRefusedWhereItCannotRun) {
  StagedSetup s;
  const zero::EngineOptions options = options_for({.dtype = DType::bfloat16, .offload_ratio = 0.5});
  refused([&] { build_engine<OnTheDevice>(s, options); }, "this placement does not offload them",
          "states in device memory");
  refused([&] { build_engine<Offloaded, zero::Lamb>(s, options); },
          "offload_ratio below 1: LAMB's trust ratios", "LAMB");
  for (const bool eight_bit : {true, false}) {
    zero::EngineOptions compressed = options;
    if (eight_bit)
      compressed.moments = zero::MomentStorage::blockwise_8bit;
    else
      compressed.master = zero::MasterStorage::split_8bit;
    refused([&] { build_engine<Offloaded>(s, compressed); },
            "the cut would fall inside their blocks",
            eight_bit ? "8-bit moments" : "split masters");
  }
  for (const double ratio : {0.0, 1.5, std::nan("")}) {
    zero::EngineOptions bad = options;
    bad.offload_ratio = ratio;
    refused([&] { bad.validate(); }, "offload_ratio (offload_optimizer.ratio)",
            "ratio " + std::to_string(ratio));
  }
  zero::EngineOptions delayed = options;
  delayed.delayed_parameter_update_after = 2;
  refused([&] { delayed.validate(); }, "offload_ratio below 1 updates part of each layer",
          "delayed update");
#if ZERO_TEST_NVME
  SharedDir swap("zero-offload-split-nvme-");
  zero::EngineOptions on_nvme =
      options_for({.dtype = DType::bfloat16, .nvme_path = swap.path, .offload_ratio = 0.5});
  refused([&] { build_engine<OffloadedToNvme>(s, on_nvme); }, "on the NVMe tier it is not built",
          "NVMe");
#endif
  const zero::config::Config config = zero::config::from_json_string(R"({"zero_optimization":
      {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.4}}})");
  EXPECT_EQ(zero::EngineOptions::from_config(config).offload_ratio, 0.4);
}

// LAMB's three passes run on the host over the staged gradients, its per-parameter sums combined
// over the host communicator.
TEST(Offload, LambGivesTheHostEnginesBits) {
  StagedSetup s;
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16, Offloaded, zero::Lamb>(
      s, {.dtype = DType::bfloat16}, "offloaded LAMB, stage 2");
}

#if ZERO_TEST_NVME
// GPU -> pinned host -> NVMe: the NVMe tier's store behind the device, sub-groups cutting layers;
// the host engine's bits (the tier's update is the in-memory one), with 8-bit moments and split
// masters too.
TEST(Offload, NvmeBehindTheDeviceGivesTheHostEnginesBits) {
  StagedSetup s;
  SharedDir swap("zero-offload-nvme-");
  Scenario run{.dtype = DType::bfloat16, .accumulation = 2, .nvme_path = swap.path};
#if !ZERO_TEST_TWIN
  if (const auto why = io_uring_refused<zero::Stage<1>, OffloadedToNvme>(s, run))
    GTEST_SKIP() << zero::testing::not_applicable << "this GPU machine: " << *why;
#endif
  expect_device_engine_equals_host<zero::Stage<1>, zero::bfloat16, OffloadedToNvme>(
      s, run, "offloaded to NVMe, stage 1");
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16, OffloadedToNvme>(
      s, run, "offloaded to NVMe, stage 3");
  // 8-bit moments swapped as codes: the host engine's bits (with its moments in memory) too.
  run.eight_bit_moments = true;
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16, OffloadedToNvme>(
      s, run, "offloaded to NVMe, 8-bit moments, stage 2");
  // Split masters: only the residuals swapped, the high parts read from the host's staging of
  // the weights it sends.
  run.master = zero::MasterStorage::split_8bit;
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16, OffloadedToNvme>(
      s, run, "offloaded to NVMe, split masters, 8-bit moments, stage 3");
}
#endif

// The delayed parameter update (DPU): from the update after `delayed_after` on, each step's
// update runs on the host while the next step's forward and backward use the weights before it.
// Against the host engine given, from then on, the gradients of the weights read one step
// earlier: the same weights bit for bit once the last update is sent (get_layer sends it), and
// the same norms; and not the weights of a run without the lag, so that the lag is there.
TEST(Offload, DelayedParameterUpdateLagsOneStep) {
  StagedSetup s;
  const Scenario delayed{.dtype = DType::bfloat16, .steps = 5, .delayed_after = 2};
  Scenario reference = delayed;
  reference.delayed_after = -1;
  reference.gradients_lag_after = 2;
  const Outcome host = train_on_host<zero::Stage<2>, zero::bfloat16>(reference);
  DeviceEngine<zero::Stage<2>, zero::bfloat16, Offloaded> engine(world(), s.comm, model(), adam(),
                                                                 zero::StaticLossScaler{},
                                                                 options_for(delayed), s.compute());
  set_weights(engine);
  Outcome device;
  device_steps<zero::bfloat16>(s, engine, delayed, 0, delayed.steps, device);
  device = finish(engine, std::move(device)); // get_layer sends the pending update first
  expect_same_norms(device, host, "DPU after 2 updates, stage 2");
  expect_same_weights(device, host, "DPU after 2 updates, stage 2");
  // ... to the compute copy too: it is the last update's, not the one before.
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    const zero::LayerParameters held = engine.acquire(l);
    const auto w = held.values<zero::bfloat16, DeviceMemory>();
    std::vector<zero::bfloat16> copy_now(w.size());
    copy(s.compute(), w, zero::View<zero::bfloat16>(copy_now));
    s.compute().fence();
    ASSERT_EQ(copy_now.size(), device.weights[l].size());
    for (std::size_t i = 0; i < copy_now.size(); ++i)
      ASSERT_EQ(zero::convert<float>(copy_now[i]),
                zero::convert<float>(zero::convert<zero::bfloat16>(device.weights[l][i])))
          << "layer " << l << " element " << i << ": the compute copy lags the master weights";
  }
  const Outcome without_lag =
      train_on_host<zero::Stage<2>, zero::bfloat16>({.dtype = DType::bfloat16, .steps = 5});
  EXPECT_NE(without_lag.weights[2][0], host.weights[2][0]) << "the lag changed nothing";
  // Stage 3 (each rank's shard sent back and gathered), delayed from the first update on.
  const Scenario at_once{.dtype = DType::bfloat16, .steps = 4, .delayed_after = 0};
  Scenario at_once_reference = at_once;
  at_once_reference.delayed_after = -1;
  at_once_reference.gradients_lag_after = 0;
  const Outcome host3 = train_on_host<zero::Stage<3>, zero::bfloat16>(at_once_reference);
  const Outcome device3 = train_on_device<zero::Stage<3>, zero::bfloat16, Offloaded>(s, at_once);
  expect_same_norms(device3, host3, "DPU from the start, stage 3");
  expect_same_weights(device3, host3, "DPU from the start, stage 3");
  // Split masters under the delayed update: the host's step reads the staged weights of the
  // update before it, which the device received meanwhile.
  Scenario split_delayed = at_once;
  split_delayed.master = zero::MasterStorage::split_8bit;
  Scenario split_reference = at_once_reference;
  split_reference.master = zero::MasterStorage::split_8bit;
  const Outcome split_host = train_on_host<zero::Stage<3>, zero::bfloat16>(split_reference);
  const Outcome split_device =
      train_on_device<zero::Stage<3>, zero::bfloat16, Offloaded>(s, split_delayed);
  expect_same_norms(split_device, split_host, "DPU with split masters, stage 3");
  expect_same_weights(split_device, split_host, "DPU with split masters, stage 3");
}

// The store-level tests below: the offloaded store on its own beside the host store it wraps, its
// states sharded on the model's layout.
using StoreKept = zero::Kept<true, zero::FlatContiguous, zero::host>;
using WrappedHostStore = zero::OptimizerStore<zero::Adam, StoreKept, zero::HostThreads>;
using OffloadedStore = zero::OffloadedOptimizerStore<WrappedHostStore, StoreKept, DeviceSpace>;
inline zero::ModelLayout sharded_layout() {
  const int rank = world().rank();
  return {zero::make_layout(world(), zero::FlatContiguous{}, model()), rank, rank};
}

// The same initial weights in a host store and the offloaded store that wraps its kind; returns
// the size of each layer's block this rank updates.
inline std::vector<std::size_t> set_both(const zero::ModelLayout& layout, WrappedHostStore& on_host,
                                         OffloadedStore& offloaded) {
  std::vector<std::size_t> blocks;
  for (std::size_t l = 0; l < layout.layers(); ++l) {
    std::vector<float> values(layout.sharded->layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = initial_value(l, i);
    on_host.set_layer(l, values);
    offloaded.set_layer(l, values);
    blocks.push_back(StoreKept::layout(layout)->block(l, StoreKept::rank(layout)).size());
  }
  return blocks;
}

// The offloaded store on its own, its states sharded, against the host store it wraps given the
// same gradients: at every done(l) layer l's new compute copy is in device memory (read there
// through another stream) and holds the host store's bits, in layer order, for two steps; with the
// update run on the host while step() returns (the delayed update), and with half of each block
// updated on the device (offload_ratio) too. Over the twin the compute
// stream runs work only once waited for, so an update that read a gradient before its copy to the
// host ran, or a done(l) before the copy back, sees stale data, every run. (In the engine the
// parameter stores do nothing at done(l), their gathers being ordered on the stream, so only a
// caller that reads the copy then shows the last wait.)
TEST(Offload, StoreHandsOnTheHostStoresCopyAtEachDone) {
  const int rank = world().rank();
  const zero::ModelLayout layout = sharded_layout();
  StagedSetup s;
  for (const std::string how : {"", "delayed, ", "split, "}) {
    const bool delayed = how == "delayed, ";
    zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
    options.delayed_parameter_update_after = delayed ? 0 : -1;
    WrappedHostStore on_host(world(), layout, options, {});
    if (how == "split, ") options.offload_ratio = 0.5;
    OffloadedStore offloaded(world(), layout, options, s.compute());
    const std::size_t layers = layout.layers();
    std::vector<std::vector<zero::bfloat16>> grads(layers), host_out(layers);
    std::vector<zero::Buffer<zero::bfloat16, DeviceMemory>> device_grads, device_out;
    const std::vector<std::size_t> blocks = set_both(layout, on_host, offloaded);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t n = blocks[l];
      for (std::size_t i = 0; i < n; ++i)
        grads[l].push_back(zero::bfloat16(
            static_cast<float>((i * 7 + l * 3 + std::size_t(rank)) % 23) * 0.1f - 1.1f));
      host_out[l].resize(n);
      device_grads.push_back(s.upload(grads[l])); // there for every stream on return
      device_out.emplace_back(n);
    }
    zero::Adam host_adam = adam(), device_adam = adam();
    for (int step = 0; step < 2; ++step) {
      on_host.step(
          host_adam.begin_step(), 1.0f / 8,
          [&](std::size_t l) { return zero::View<const zero::bfloat16>(grads[l]); },
          [&](std::size_t l) { return zero::View<zero::bfloat16>(host_out[l]); },
          [](std::size_t) {});
      const ComputeHold held(s, true);
      std::size_t next_done = 0;
      const auto out = [&](std::size_t l) { return device_out[l].view(); };
      const auto done = [&](std::size_t l) {
        EXPECT_EQ(l, next_done++) << "done() out of layer order";
        const std::vector<zero::bfloat16> got = s.read(device_out[l]);
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i].bits, host_out[l][i].bits)
              << how << "step " << step << ", layer " << l << " element " << i
              << ": not the host store's compute copy at done()";
      };
      offloaded.step(
          device_adam.begin_step(), 1.0f / 8,
          [&](std::size_t l) { return std::as_const(device_grads[l]).view(); }, out, done);
      if (delayed) {
        EXPECT_TRUE(offloaded.update_pending());
        offloaded.finish_delayed_update(out, done);
      }
      EXPECT_EQ(next_done, layers);
      s.compute().fence(); // what a store that did not wait left queued runs before the buffers go
    }
  }
}

// During backward each layer's reduced gradient leaves for the host as soon as the store is told
// it is final (gradient_reduced), on the store's copy stream, ordered after the work queued on the
// engine's stream so far (its delivery). Each step's gradients are written there while the stream
// defers its work (the twin): a copy not ordered after the write reads the step before's gradient,
// every run. The host store's bits: after a step skipped between two (its copies sent, never
// used), and under the delayed update, whose running update reads the staging while the next
// backward runs: none is sent early then, the step sends them.
TEST(Offload, GradientsLeaveDuringBackwardAfterTheirDelivery) {
  using T = zero::bfloat16;
  const int rank = world().rank();
  const zero::ModelLayout layout = sharded_layout();
  const std::size_t layers = layout.layers();
  StagedSetup s;
  for (const bool delayed : {false, true}) {
    const std::string run = delayed ? "delayed update, " : "";
    zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
    options.delayed_parameter_update_after = delayed ? 0 : -1;
    WrappedHostStore on_host(world(), layout, options, {});
    OffloadedStore offloaded(world(), layout, options, s.compute());
    std::vector<std::vector<T>> host_out(layers);
    std::vector<zero::Buffer<T, DeviceMemory>> device_grads, device_out;
    const std::vector<std::size_t> blocks = set_both(layout, on_host, offloaded);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t n = blocks[l];
      host_out[l].resize(n);
      device_grads.push_back(s.upload(std::vector<T>(n, T(0.0f))));
      device_out.emplace_back(n);
    }
    const auto gradient = [&](int step, std::size_t l) {
      std::vector<T> g(host_out[l].size());
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] =
            T(static_cast<float>((i * 7 + l * 3 + std::size_t(rank) + std::size_t(step) * 5) % 23) *
                  0.1f -
              1.1f);
      return g;
    };
    const auto device_grad = [&](std::size_t l) { return std::as_const(device_grads[l]).view(); };
    const auto out = [&](std::size_t l) { return device_out[l].view(); };
    const auto nothing = [](std::size_t) {};
    zero::Adam host_adam = adam(), device_adam = adam();
    // Step 1 is skipped (an overflow elsewhere): its gradients are sent and never read.
    for (int step = 0; step < 4; ++step) {
      const bool skipped = !delayed && step == 1;
      std::vector<zero::Buffer<T, zero::pinned_host>> pinned;
      {
        const ComputeHold held(s, true);
        for (std::size_t l = layers; l-- > 0;) { // backward: each layer's delivery, then its news
          const std::vector<T> g = gradient(step, l);
          pinned.emplace_back(g.size(), zero::uninitialized);
          std::copy(g.begin(), g.end(), pinned.back().data());
          copy(s.compute(), zero::View<const T, zero::pinned_host>(pinned.back().view()),
               device_grads[l].view());
          offloaded.gradient_reduced(l, device_grad(l));
        }
        if (!skipped) {
          offloaded.step(device_adam.begin_step(), 1.0f / 8, device_grad, out, nothing);
        }
        offloaded.end_step();
        // A delayed update still running through the next backward takes nothing early; a
        // skipped step counts nothing.
        EXPECT_EQ(offloaded.step_report().gradients_in_backward,
                  skipped || (delayed && step > 0) ? 0 : layers)
            << run << "step " << step;
        s.compute().fence(); // the pinned sources outlive the copies
      }
      if (skipped) continue;
      std::vector<std::vector<T>> grads(layers);
      for (std::size_t l = 0; l < layers; ++l)
        grads[l] = gradient(step, l);
      on_host.step(
          host_adam.begin_step(), 1.0f / 8,
          [&](std::size_t l) { return zero::View<const T>(grads[l]); },
          [&](std::size_t l) { return zero::View<T>(host_out[l]); }, nothing);
      if (delayed) { // the last update compared once it is sent; the others run through backward
        if (step < 3) continue;
        offloaded.finish_delayed_update(out, nothing);
      }
      for (std::size_t l = 0; l < layers; ++l) {
        const std::vector<T> got = s.read(device_out[l]);
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i].bits, host_out[l][i].bits)
              << run << "step " << step << ", layer " << l << " element " << i
              << ": not the host store's compute copy (a gradient sent before its delivery?)";
      }
    }
  }
}

#if ZERO_TEST_TWIN
// The speculative update's thread updates a layer only once its gradient has arrived in staging:
// with the copy stream deferring its work (the twin), an update that did not wait for the copy
// reads what the staging held before, every run. Three steps, each keeping what was speculated:
// the host store's bits.
TEST(Offload, SpeculationUpdatesALayerOnlyOnceItsGradientArrived) {
  using T = zero::bfloat16;
  const zero::ModelLayout layout = sharded_layout();
  const std::size_t layers = layout.layers();
  StagedSetup s;
  const zero::EngineOptions options = options_for({.dtype = DType::bfloat16, .speculative = true});
  WrappedHostStore on_host(world(), layout, options, {});
  OffloadedStore offloaded(world(), layout, options, s.compute());
  const std::vector<std::size_t> blocks = set_both(layout, on_host, offloaded);
  std::vector<std::vector<T>> host_out(layers);
  std::vector<zero::Buffer<T, DeviceMemory>> device_grads, device_out;
  for (std::size_t l = 0; l < layers; ++l) {
    host_out[l].resize(blocks[l]);
    device_grads.push_back(s.upload(std::vector<T>(blocks[l], T(0.0f))));
    device_out.emplace_back(blocks[l]);
  }
  const auto device_grad = [&](std::size_t l) { return std::as_const(device_grads[l]).view(); };
  const auto out = [&](std::size_t l) { return device_out[l].view(); };
  const auto nothing = [](std::size_t) {};
  zero::HostStream& copies = offloaded.staging().copy_space().stream();
  copies.defer_until_waited();
  zero::Adam host_adam = adam(), device_adam = adam();
  constexpr float multiplier = 1.0f / 8;
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<T>> grads(layers);
    {
      zero::Adam next = device_adam;
      offloaded.speculate<T, T>(next.begin_step(), multiplier);
    }
    std::vector<zero::Buffer<T, zero::pinned_host>> pinned;
    for (std::size_t l = layers; l-- > 0;) {
      for (std::size_t i = 0; i < blocks[l]; ++i)
        grads[l].push_back(
            T(static_cast<float>((i * 5 + l + std::size_t(step) * 3) % 19) * 0.1f - 0.9f));
      pinned.emplace_back(blocks[l], zero::uninitialized);
      std::copy(grads[l].begin(), grads[l].end(), pinned.back().data());
      copy(s.compute(), zero::View<const T, zero::pinned_host>(pinned.back().view()),
           device_grads[l].view());
      offloaded.gradient_reduced(l, device_grad(l));
    }
    offloaded.step(device_adam.begin_step(), multiplier, device_grad, out, nothing);
    offloaded.end_step();
    s.compute().fence();
    EXPECT_EQ(offloaded.step_report().speculation.layers, layers) << "step " << step;
    EXPECT_FALSE(offloaded.step_report().speculation.rolled_back) << "step " << step;
    on_host.step(
        host_adam.begin_step(), multiplier,
        [&](std::size_t l) { return zero::View<const T>(grads[l]); },
        [&](std::size_t l) { return zero::View<T>(host_out[l]); }, nothing);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::vector<T> got = s.read(device_out[l]);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i].bits, host_out[l][i].bits)
            << "step " << step << ", layer " << l << " element " << i
            << ": not the host store's compute copy (a layer updated before its gradient "
               "arrived?)";
    }
  }
  copies.end_deferral();
}
#endif

// Without the optimizer offloaded there is no host update to delay: refused, naming the option.
TEST(Offload, RefusesADelayedUpdateOnTheDevice) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  options.delayed_parameter_update_after = 1;
  try {
    DeviceEngine<zero::Stage<2>, zero::bfloat16> engine(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    ADD_FAILURE() << "a delayed update was accepted with the states in device memory";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("delayed_parameter_update_after: the delayed parameter "
                                         "update overlaps"),
              std::string::npos)
        << e.what();
  }
}

// The memory report says where the states are, and counts the staging as buffers; a config's
// offload_optimizer.device = "cpu" is what this placement does, and is accepted.
TEST(Offload, ReportsTheHostStatesAndAcceptsTheConfigsRequest) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  options.offload_optimizer = zero::config::OffloadDevice::cpu;
  DeviceEngine<zero::Stage<2>, zero::bfloat16, Offloaded> engine(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
  const zero::MemoryReport m = engine.memory();
  EXPECT_STREQ(m.optimizer_tier, "host");
  EXPECT_STREQ(m.parameters_tier, DeviceMemory::name);
  EXPECT_STREQ(m.gradients_tier, DeviceMemory::name);
  std::size_t numel = 0;
  for (const zero::ParameterSpec& p : model())
    numel += p.numel;
  // fp32 master weights of this rank's shard at least, and two moments of the same size.
  EXPECT_GE(m.master_weights.memory * std::size_t(s.ranks), numel * sizeof(float));
  EXPECT_EQ(m.optimizer_states.memory, 2 * m.master_weights.memory);
  // Staging: a bf16 gradient and a bf16 compute copy per element this rank updates.
  EXPECT_GE(m.buffers, m.master_weights.memory / sizeof(float) * 2 * sizeof(zero::bfloat16));
}

// A config asking for the states on NVMe while the placement keeps them in host memory is refused,
// naming the key and the placement to use.
TEST(Offload, RefusesAConfigsNvmeForHostMemory) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  options.offload_optimizer = zero::config::OffloadDevice::nvme;
  try {
    DeviceEngine<zero::Stage<2>, zero::bfloat16, Offloaded> engine(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    ADD_FAILURE() << "the engine ignored offload_optimizer.device = nvme";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_optimizer.device = \"nvme\", but this engine "
                                         "keeps them in memory"),
              std::string::npos)
        << e.what();
  }
}

} // namespace device_engine_test
