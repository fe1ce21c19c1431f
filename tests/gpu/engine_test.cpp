// The engine over a device stream space (Placement<execute_on<CudaStreamSpace>>; DeviceTwinSpace
// in CI, see staged_setup.hpp): every model state in the device's memory, the model states moved
// by the staged communicator (counted, as the engine counts every group), the engine's own
// collectives over a host MpiCommunicator, and the stores' kernels on a compute stream that is not
// the staged communicator's caller stream. Trained as a trainer on a GPU would: backward reads the
// acquired weights and writes the gradients through copies queued on the compute stream, without
// waiting for them. Stages 0-3, fp32 and bf16 (with micro-steps and clipping), against the
// HostThreads engine given the same gradients: the same weights bit for bit, and the same norms.
// Run under mpirun at 1-3 ranks.

#include "device_model.hpp"
#include "staged_setup.hpp"
#include "test_outcome.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/stage/placement.hpp>
#include <zero/stage/plan.hpp>
#if !ZERO_TEST_TWIN
#include <zero/engine/cuda_engine.hpp> // the CUDA kernels the stores call
#endif

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace device_engine_test {

using namespace zero::testing;
using zero::DType;

using OnTheDevice = zero::Placement<zero::execute_on<DeviceSpace>>;

std::vector<zero::ParameterSpec> model() {
  return engine_test_model();
}

float initial_value(std::size_t layer, std::size_t i) {
  return static_cast<float>(std::sin(0.37 * double(i) + double(layer))) * 0.5f;
}

// Depends on the weights (every stage must share the same ones to agree) and on the rank.
template <class T>
std::vector<T> gradients_of(const std::vector<T>& weights, int rank, int step, int micro,
                            std::size_t layer) {
  std::vector<T> g(weights.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float noise = static_cast<float>((i * 13 + layer * 7 + std::size_t(rank) * 31 +
                                            std::size_t(step) * 17 + std::size_t(micro) * 5) %
                                           97) /
                            97.0f -
                        0.5f;
    g[i] = zero::convert<T>(0.3f * zero::convert<float>(weights[i]) + noise);
  }
  return g;
}

struct Scenario {
  DType dtype;
  int accumulation = 1;
  double clipping = 0;
  int steps = 3;
  std::size_t bucket = 500;    // reduce_bucket_elements
  std::size_t persistence = 0; // stage 3's persistence_threshold
  // The compute stream starts no work for 150 ms from the start of each backward (the twin
  // only): a collective or an update not ordered after the gradients' copies reads stale ones.
  // Backward must then not wait for the stream itself (one bucket, stage 3's layers kept
  // gathered), or the hold ends before the later layers' copies are queued.
  bool held = false;
};

struct Outcome {
  std::vector<std::vector<float>> weights;
  std::vector<double> norms;
};

zero::EngineOptions options_for(const Scenario& run) {
  zero::EngineOptions options;
  options.compute_dtype = run.dtype;
  options.gradient_accumulation_steps = run.accumulation;
  options.gradient_clipping = run.clipping;
  options.reduce_bucket_elements = run.bucket;
  options.persistence_threshold = run.persistence;
  options.allgather_bucket_elements = 700;
  options.prefetch_elements = 3000;
  return options;
}

template <class EngineType>
void set_weights(EngineType& engine) {
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> init(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < init.size(); ++i)
      init[i] = initial_value(l, i);
    engine.set_layer(l, init);
  }
}

template <class EngineType>
Outcome finish(EngineType& engine, Outcome outcome) {
  for (std::size_t l = 0; l < engine.layers(); ++l)
    outcome.weights.push_back(engine.get_layer(l));
  return outcome;
}

template <class Plan, class T>
using HostEngine = zero::Engine<Plan, zero::MpiCommunicator, zero::host, zero::Adam,
                                zero::StaticLossScaler, zero::ComputeTypes<T>>;
template <class Plan, class T>
using DeviceEngine = zero::Engine<Plan, Staged, OnTheDevice, zero::Adam, zero::StaticLossScaler,
                                  zero::ComputeTypes<T>>;

zero::Adam adam() {
  return zero::Adam({.lr = 0.01, .weight_decay = 0.01});
}

template <class Plan, class T>
HostEngine<Plan, T> host_engine(const Scenario& run) {
  return HostEngine<Plan, T>(world(), model(), adam(), zero::StaticLossScaler{}, options_for(run));
}

// Steps `first` to `first + count - 1` of the scenario.
template <class T, class EngineType>
void host_steps(EngineType& engine, const Scenario& run, int first, int count, Outcome& outcome) {
  for (int step = first; step < first + count; ++step) {
    for (int micro = 0; micro < run.accumulation; ++micro)
      for (std::size_t l = engine.layers(); l-- > 0;) {
        const zero::LayerParameters held = engine.acquire(l);
        const auto w = held.template values<T>();
        const std::vector<T> g =
            gradients_of(std::vector<T>(w.begin(), w.end()), world().rank(), step, micro, l);
        const zero::View<T> out = engine.template gradients<T>(l);
        std::copy(g.begin(), g.end(), out.begin());
        engine.grads_ready(l);
      }
    outcome.norms.push_back(engine.step().grad_norm);
  }
}

// The same over the device engine: the weights are read ("forward") and the gradients written
// ("backward") by copies on the compute stream, as a trainer's kernels would: the engine must
// order its collectives and the step after the gradients' copies, which it does not wait for.
template <class T, class EngineType>
void device_steps(StagedSetup& s, EngineType& engine, const Scenario& run, int first, int count,
                  Outcome& outcome) {
  for (int step = first; step < first + count; ++step) {
    std::vector<std::vector<T>> weights(engine.layers());
    for (std::size_t l = 0; l < engine.layers(); ++l) {
      const zero::LayerParameters held = engine.acquire(l);
      const auto w = held.template values<T, DeviceMemory>();
      weights[l].resize(w.size());
      copy(s.compute(), w, zero::View<T>(weights[l]));
    }
    s.compute().fence();
    std::vector<zero::Buffer<T, zero::pinned_host>> pinned; // until the stream ran the copies
    // Longer than the stores' tests' holds: a check below fails if backward outlasts it (on a
    // loaded two-core machine under a sanitizer, say).
    ComputeHold hold(s, run.held, std::chrono::milliseconds(300));
    for (int micro = 0; micro < run.accumulation; ++micro)
      // example-begin device-backward
      for (std::size_t l = engine.layers(); l-- > 0;) {
        const zero::LayerParameters held = engine.acquire(l); // stage 3: gathered for backward
        const std::vector<T> g = gradients_of(weights[l], s.rank, step, micro, l);
        const zero::View<T, DeviceMemory> out = engine.template gradients<T>(l);
        EXPECT_EQ(out.size(), g.size());
        pinned.emplace_back(g.size(), zero::uninitialized);
        std::copy(g.begin(), g.end(), pinned.back().data());
        copy(s.compute(), zero::View<const T, zero::pinned_host>(pinned.back().view()), out);
        engine.grads_ready(l); // the copy may not have run yet
      }
    // example-end device-backward
    if (run.held) {
      EXPECT_TRUE(hold.holding()) << "backward waited for the held stream: the held case holds "
                                     "only the first layers' copies";
    }
    outcome.norms.push_back(engine.step().grad_norm);
    hold.ended();
    s.compute().fence();
  }
}

template <class Plan, class T>
Outcome train_on_host(const Scenario& run) {
  auto engine = host_engine<Plan, T>(run);
  set_weights(engine);
  Outcome outcome;
  host_steps<T>(engine, run, 0, run.steps, outcome);
  return finish(engine, std::move(outcome));
}

template <class Plan, class T>
Outcome train_on_device(StagedSetup& s, const Scenario& run) {
  // example-begin device-engine
  // world(): a host MpiCommunicator (the engine's own collectives); s.comm: a StagedCommunicator
  // of the same ranks (the model states); s.compute(): the stream the stores queue their work on.
  zero::Engine<Plan, Staged, OnTheDevice, zero::Adam, zero::StaticLossScaler, zero::ComputeTypes<T>>
      engine(world(), s.comm, model(), zero::Adam({.lr = 0.01, .weight_decay = 0.01}),
             zero::StaticLossScaler{}, options_for(run), s.compute());
  // example-end device-engine
  set_weights(engine);
  Outcome outcome;
  device_steps<T>(s, engine, run, 0, run.steps, outcome);
  return finish(engine, std::move(outcome));
}

void expect_same_weights(const Outcome& device, const Outcome& host, const std::string& what) {
  ASSERT_EQ(device.weights.size(), host.weights.size());
  for (std::size_t l = 0; l < host.weights.size(); ++l) {
    ASSERT_EQ(device.weights[l].size(), host.weights[l].size());
    for (std::size_t i = 0; i < host.weights[l].size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(device.weights[l][i]),
                std::bit_cast<std::uint32_t>(host.weights[l][i]))
          << what << ": layer " << l << " element " << i << ": " << device.weights[l][i]
          << " against " << host.weights[l][i];
  }
}

template <class Plan, class T>
void expect_device_engine_equals_host(StagedSetup& s, const Scenario& run,
                                      const std::string& what) {
  SCOPED_TRACE(what);
  const Outcome host = train_on_host<Plan, T>(run);
  const Outcome device = train_on_device<Plan, T>(s, run);
  ASSERT_EQ(device.norms.size(), host.norms.size());
  for (std::size_t k = 0; k < host.norms.size(); ++k)
#if ZERO_TEST_TWIN // the host's kernels: the host's bits
    EXPECT_EQ(std::bit_cast<std::uint64_t>(device.norms[k]),
              std::bit_cast<std::uint64_t>(host.norms[k]))
#else // CUDA adds its blocks' partial sums: fp64 rounding of the host's sum
    EXPECT_NEAR(device.norms[k], host.norms[k], 1e-12 * host.norms[k])
#endif
        << what << ": the norm of step " << k << ": " << device.norms[k] << " against "
        << host.norms[k];
  EXPECT_NE(device.weights[2][0], initial_value(2, 0)) << what << ": it trained";
  expect_same_weights(device, host, what);
}

template <class T>
void every_stage(StagedSetup& s, const Scenario& run) {
  const std::string what = std::string(zero::to_string(run.dtype)) + ", micro-steps " +
                           std::to_string(run.accumulation) + ", stage ";
  expect_device_engine_equals_host<zero::Stage<0>, T>(s, run, what + "0");
  expect_device_engine_equals_host<zero::Stage<1>, T>(s, run, what + "1");
  expect_device_engine_equals_host<zero::Stage<2>, T>(s, run, what + "2");
  expect_device_engine_equals_host<zero::Stage<3>, T>(s, run, what + "3");
}

#if ZERO_TEST_TWIN
TEST(DeviceEngine, Fp32GivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<float>(s, {.dtype = DType::float32});
}
#else
// CUDA's fused step writes a half or bfloat16 compute copy only: an fp32 one is refused when the
// engine is built, naming it (an engine compiled for every compute type still compiles).
TEST(DeviceEngine, Fp32ComputeIsRefusedOverCuda) {
  StagedSetup s;
  try {
    DeviceEngine<zero::Stage<0>, float> engine(world(), s.comm, model(), adam(),
                                               zero::StaticLossScaler{},
                                               options_for({.dtype = DType::float32}), s.compute());
    ADD_FAILURE() << "an fp32 compute copy over CUDA was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("writes a float16 or bfloat16 compute copy only"),
              std::string::npos)
        << e.what();
  }
}
#endif

#if ZERO_TEST_TWIN
// The compute stream held through each backward: every stage must start its reductions after the
// gradients' copies queued there (through the staged communicator pointed at the engine's stream)
// and update after them.
TEST(DeviceEngine, HeldBackwardGivesTheHostEnginesBits) {
  StagedSetup s;
  constexpr std::size_t everything = 1 << 20; // one bucket; every stage 3 layer kept gathered
  every_stage<float>(s, {.dtype = DType::float32,
                         .steps = 2,
                         .bucket = everything,
                         .persistence = everything,
                         .held = true});
  // bf16, two micro-steps where backward does not wait for the stream: stages 0 and 1 add them
  // locally; stages 2 and 3 reduce every micro-step through the one bucket, whose reuse in the
  // second waits for the first's collective (so for the held stream), and run one here.
  Scenario bf16{.dtype = DType::bfloat16,
                .accumulation = 2,
                .steps = 2,
                .bucket = everything,
                .persistence = everything,
                .held = true};
  expect_device_engine_equals_host<zero::Stage<0>, zero::bfloat16>(s, bf16, "bf16 held, stage 0");
  expect_device_engine_equals_host<zero::Stage<1>, zero::bfloat16>(s, bf16, "bf16 held, stage 1");
  bf16.accumulation = 1;
  expect_device_engine_equals_host<zero::Stage<2>, zero::bfloat16>(s, bf16, "bf16 held, stage 2");
  expect_device_engine_equals_host<zero::Stage<3>, zero::bfloat16>(s, bf16, "bf16 held, stage 3");
}
#endif

TEST(DeviceEngine, Bf16WithMicroStepsAndClippingGivesTheHostEnginesBits) {
  StagedSetup s;
  every_stage<zero::bfloat16>(s, {.dtype = DType::bfloat16, .accumulation = 2, .clipping = 0.05});
}

// A directory of the same name on every rank (one machine), removed at the end.
struct SharedDir {
  std::filesystem::path path;
  SharedDir() {
    std::vector<std::int64_t> n{std::int64_t(std::random_device{}() & 0x7fffffff)};
    world().broadcast(n, 0).wait();
    path = std::filesystem::temp_directory_path() / ("zero-device-engine-" + std::to_string(n[0]));
    if (world().rank() == 0) std::filesystem::create_directories(path);
    world().barrier();
  }
  ~SharedDir() {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(path);
  }
};

// A device engine's checkpoint is a host engine's: saved from device memory through host copies,
// loaded by a host engine into the same weights, and by a device engine of another stage, whose
// compute copy (written from the loaded master weights through a host copy) then trains on as the
// host engine does.
TEST(DeviceEngine, CheckpointsMoveBetweenTheDeviceAndTheHost) {
  StagedSetup s;
  SharedDir dir;
  const Scenario run{.dtype = DType::bfloat16};
  DeviceEngine<zero::Stage<1>, zero::bfloat16> saved(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  set_weights(saved);
  Outcome ignored;
  device_steps<zero::bfloat16>(s, saved, run, 0, 2, ignored);
  saved.save_checkpoint(dir.path, "device");
  const Outcome at_save = finish(saved, {});

  auto host = host_engine<zero::Stage<1>, zero::bfloat16>(run);
  host.load_checkpoint(dir.path, "device");
  expect_same_weights(finish(host, {}), at_save, "loaded by the host engine");

  DeviceEngine<zero::Stage<3>, zero::bfloat16> loaded(
      world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options_for(run), s.compute());
  loaded.load_checkpoint(dir.path, "device");
  expect_same_weights(finish(loaded, {}), at_save, "loaded by a stage 3 device engine");
  Outcome on_host, on_device;
  host_steps<zero::bfloat16>(host, run, 2, 1, on_host);
  device_steps<zero::bfloat16>(s, loaded, run, 2, 1, on_device);
#if ZERO_TEST_TWIN
  EXPECT_EQ(std::bit_cast<std::uint64_t>(on_device.norms[0]),
            std::bit_cast<std::uint64_t>(on_host.norms[0]));
#else
  EXPECT_NEAR(on_device.norms[0], on_host.norms[0], 1e-12 * on_host.norms[0]);
#endif
  expect_same_weights(finish(loaded, {}), finish(host, {}), "a step after loading");
}

// A DeepSpeed config asking to offload the optimizer states is refused by an engine that keeps them
// in device memory, naming the key, rather than ignored.
TEST(DeviceEngine, RefusesAConfigsOffload) {
  StagedSetup s;
  zero::EngineOptions options = options_for({.dtype = DType::bfloat16});
  options.offload_optimizer = zero::config::OffloadDevice::cpu;
  try {
    DeviceEngine<zero::Stage<1>, zero::bfloat16> engine(
        world(), s.comm, model(), adam(), zero::StaticLossScaler{}, options, s.compute());
    ADD_FAILURE() << "the engine ignored offload_optimizer.device = cpu";
  } catch (const zero::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("offload_optimizer.device = \"cpu\", but this engine keeps "
                                   "them in device memory"),
        std::string::npos)
        << e.what();
  }
}

// LAMB's step keeps its states in host memory: over a device space it is refused when the engine
// is built, naming the space (it compiles, as a program taking its optimizer from a config must).
TEST(DeviceEngine, RefusesLamb) {
  StagedSetup s;
  using LambOnTheDevice = zero::Engine<zero::Stage<1>, Staged, OnTheDevice, zero::Lamb,
                                       zero::StaticLossScaler, zero::ComputeTypes<zero::bfloat16>>;
  try {
    LambOnTheDevice engine(world(), s.comm, model(), zero::Lamb{}, zero::StaticLossScaler{},
                           options_for({.dtype = DType::bfloat16}), s.compute());
    ADD_FAILURE() << "LAMB over a device space was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(LAMB) keeps its states in host memory: its step over " +
                                         std::string(DeviceSpace::name) + " is not built"),
              std::string::npos)
        << e.what();
  }
}

// The two communicators must hold the same ranks in the same order: a device communicator whose
// ranks run backwards is refused on every rank, naming the mismatch, before any collective that
// could leave ranks waiting in different ones.
TEST(DeviceEngine, RefusesCommunicatorsOfDifferentRankOrders) {
  StagedSetup s;
  if (s.ranks < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  Staged backwards(zero::MpiCommunicator(world().boost_communicator()).split(0, -s.rank),
                   s.caller(), DeviceSpace(s.streams.transfer));
  try {
    DeviceEngine<zero::Stage<1>, float> engine(world(), backwards, model(), adam(),
                                               zero::StaticLossScaler{}, {}, s.compute());
    ADD_FAILURE() << "the engine took communicators of different rank orders";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("same ranks in the same order"), std::string::npos)
        << e.what();
  }
}

} // namespace device_engine_test
