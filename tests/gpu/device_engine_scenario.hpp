#pragma once
// The device engine tests' training (engine_test.cpp, offload_test.cpp): the same model, weights
// and gradients through the HostThreads engine and through an engine over the device space
// (any placement: every state in device memory, or ZeRO-Offload's), compared bit for bit. Backward
// reads the acquired weights and writes the gradients through copies queued on the compute stream
// without waiting for them, as a trainer's kernels would.

#include "device_model.hpp"
#include "staged_setup.hpp"

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
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace device_engine_test {

using namespace zero::testing;
using zero::DType;

using OnTheDevice = zero::Placement<zero::execute_on<DeviceSpace>>;

inline std::vector<zero::ParameterSpec> model() {
  return engine_test_model();
}

inline float initial_value(std::size_t layer, std::size_t i) {
  return static_cast<float>(std::sin(0.37 * double(i) + double(layer))) * 0.5f;
}

struct Scenario {
  DType dtype;
  int accumulation = 1;
  double clipping = 0;
  int steps = 3;
  std::size_t bucket = 500;             // reduce_bucket_elements
  std::size_t persistence = 0;          // stage 3's persistence_threshold
  std::size_t max_live = 1'000'000'000; // stage 3's max_live_elements
  // From the start of each backward to the end of its step, the compute stream runs work only once
  // waited for (the twin only: ComputeHold): a collective, a read or an update not ordered after
  // the gradients' copies, or after the step's own work, reads stale data, every run.
  bool held = false;
  // At this step, rank 0's first gradient element is infinite: the step is skipped on every rank.
  int overflow_step = -1;
  // Where an engine placing optimizer states (and stage 3's parameters) on NVMe keeps them (empty:
  // none does).
  std::filesystem::path nvme_path = {};
  // Parameter elements of the first layers kept in memory with the parameters on NVMe
  // (offload_param.max_in_cpu).
  std::size_t parameters_in_cpu = 0;
  // EngineOptions::delayed_parameter_update_after (the device engine's; -1: off).
  std::int64_t delayed_after = -1;
  // EngineOptions::speculative_update (the device engine's: the host engine's run never has it).
  bool speculative = false;
  // EngineOptions::offload_ratio (the device engine's: the host engine's run updates all on the
  // CPU).
  double offload_ratio = 1.0;
  // The host engine's run only: from the step after this one on, each step's gradients are those
  // of the weights read one step earlier, as under a delayed parameter update (-1: never).
  int gradients_lag_after = -1;
  // Adam's moments in 8 bits (EngineOptions::moments): every layer's, or those of at least this
  // many elements (EngineOptions::eight_bit_min_elements).
  bool eight_bit_moments = false;
  std::size_t eight_bit_min_elements = 0;
  // The master weights in fp32 or split into the compute weight and a residual
  // (EngineOptions::master).
  zero::MasterStorage master = zero::MasterStorage::fp32;
};

// Depends on the weights (every stage must share the same ones to agree) and on the rank.
template <class T>
std::vector<T> gradients_of(const Scenario& run, const std::vector<T>& weights, int rank, int step,
                            int micro, std::size_t layer) {
  std::vector<T> g(weights.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float noise = static_cast<float>((i * 13 + layer * 7 + std::size_t(rank) * 31 +
                                            std::size_t(step) * 17 + std::size_t(micro) * 5) %
                                           97) /
                            97.0f -
                        0.5f;
    g[i] = zero::convert<T>(0.3f * zero::convert<float>(weights[i]) + noise);
  }
  if (step == run.overflow_step && rank == 0 && micro == 0 && layer == 0 && !g.empty())
    g[0] = zero::convert<T>(std::numeric_limits<float>::infinity());
  return g;
}

struct Outcome {
  std::vector<std::vector<float>> weights;
  std::vector<double> norms;
  std::vector<bool> applied;
  std::vector<std::size_t> offloaded_in_backward;   // StepResult::offload.gradients_in_backward
  std::vector<zero::SpeculationReport> speculation; // StepResult::offload.speculation
  std::vector<zero::SplitReport> split;             // StepResult::offload.split
};

inline zero::EngineOptions options_for(const Scenario& run) {
  zero::EngineOptions options;
  options.compute_dtype = run.dtype;
  options.gradient_accumulation_steps = run.accumulation;
  options.gradient_clipping = run.clipping;
  options.reduce_bucket_elements = run.bucket;
  options.persistence_threshold = run.persistence;
  options.max_live_elements = run.max_live;
  options.allgather_bucket_elements = 700;
  options.prefetch_elements = 3000;
  options.delayed_parameter_update_after = run.delayed_after;
  options.speculative_update = run.speculative;
  options.offload_ratio = run.offload_ratio;
  options.master = run.master;
  if (run.eight_bit_moments) {
    options.moments = zero::MomentStorage::blockwise_8bit;
    options.eight_bit_min_elements = run.eight_bit_min_elements;
  }
  if (!run.nvme_path.empty()) {
    // Sub-groups of one 4096-byte unit cut the larger layers; three slots, pipelined.
    options.nvme.optimizer.nvme_path = run.nvme_path;
    options.nvme.optimizer.sub_group_size = 1024;
    options.nvme.optimizer.buffer_count = 3;
    options.nvme.optimizer.pipeline_read = options.nvme.optimizer.pipeline_write = true;
    // Read only where the placement keeps the parameters there.
    options.nvme.parameters.nvme_path = run.nvme_path;
    options.nvme.parameters.max_in_cpu = run.parameters_in_cpu;
    options.nvme.parameters.buffer_count = 3;
    options.nvme.parameters.buffer_size = 1 << 16;
  }
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

template <class Plan, class T, class Opt = zero::Adam>
using HostEngine = zero::Engine<Plan, zero::MpiCommunicator, zero::host, Opt,
                                zero::StaticLossScaler, zero::ComputeTypes<T>>;
template <class Plan, class T, class Where = OnTheDevice, class Opt = zero::Adam>
using DeviceEngine =
    zero::Engine<Plan, Staged, Where, Opt, zero::StaticLossScaler, zero::ComputeTypes<T>>;

template <class Opt = zero::Adam>
Opt make_optimizer() {
  if constexpr (std::is_same_v<Opt, zero::Lamb>)
    return zero::Lamb({.lr = 0.01, .weight_decay = 0.01});
  else
    return zero::Adam({.lr = 0.01, .weight_decay = 0.01});
}

inline zero::Adam adam() {
  return make_optimizer<zero::Adam>();
}

template <class Plan, class T, class Opt = zero::Adam>
HostEngine<Plan, T, Opt> host_engine(const Scenario& run) {
  zero::EngineOptions options = options_for(run);
  options.speculative_update = false; // ZeRO-Offload's: the reference steps without them
  options.offload_ratio = 1;
  return HostEngine<Plan, T, Opt>(world(), model(), make_optimizer<Opt>(), zero::StaticLossScaler{},
                                  options);
}

template <class EngineType>
void record_step(EngineType& engine, Outcome& outcome) {
  const zero::StepResult result = engine.step();
  outcome.norms.push_back(result.grad_norm);
  outcome.applied.push_back(result.applied);
  outcome.offloaded_in_backward.push_back(result.offload.gradients_in_backward);
  outcome.speculation.push_back(result.offload.speculation);
  outcome.split.push_back(result.offload.split);
}

// Steps `first` to `first + count - 1` of the scenario.
template <class T, class EngineType>
void host_steps(EngineType& engine, const Scenario& run, int first, int count, Outcome& outcome) {
  std::vector<std::vector<T>> earlier(engine.layers()); // the weights read at the step before
  for (int step = first; step < first + count; ++step) {
    const bool lagging = run.gradients_lag_after >= 0 && step > run.gradients_lag_after;
    std::vector<std::vector<T>> now(engine.layers());
    for (int micro = 0; micro < run.accumulation; ++micro)
      for (std::size_t l = engine.layers(); l-- > 0;) {
        const zero::LayerParameters held = engine.acquire(l);
        const auto w = held.template values<T>();
        now[l].assign(w.begin(), w.end());
        const std::vector<T> g =
            gradients_of(run, lagging ? earlier[l] : now[l], world().rank(), step, micro, l);
        const zero::View<T> out = engine.template gradients<T>(l);
        std::copy(g.begin(), g.end(), out.begin());
        engine.grads_ready(l);
      }
    earlier = std::move(now);
    record_step(engine, outcome);
  }
}

// The same over the device engine: the weights are read ("forward") and the gradients written
// ("backward") by copies on the compute stream, as a trainer's kernels would: the engine must
// order its collectives and the step after the gradients' copies, which it does not wait for.
// `after_backward(step)`, when given, runs between each step's backward and its step().
template <class T, class EngineType>
void device_steps(StagedSetup& s, EngineType& engine, const Scenario& run, int first, int count,
                  Outcome& outcome, const std::function<void(int)>& after_backward = {}) {
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
    ComputeHold hold(s, run.held);
    for (int micro = 0; micro < run.accumulation; ++micro)
      // example-begin device-backward
      for (std::size_t l = engine.layers(); l-- > 0;) {
        const zero::LayerParameters held = engine.acquire(l); // stage 3: gathered for backward
        const std::vector<T> g = gradients_of(run, weights[l], s.rank, step, micro, l);
        const zero::View<T, DeviceMemory> out = engine.template gradients<T>(l);
        EXPECT_EQ(out.size(), g.size());
        pinned.emplace_back(g.size(), zero::uninitialized);
        std::copy(g.begin(), g.end(), pinned.back().data());
        copy(s.compute(), zero::View<const T, zero::pinned_host>(pinned.back().view()), out);
        engine.grads_ready(l); // the copy may not have run yet
      }
    // example-end device-backward
    if (after_backward) after_backward(step);
    record_step(engine, outcome);
    s.compute().fence();
  }
}

template <class Plan, class T, class Opt = zero::Adam>
Outcome train_on_host(const Scenario& run) {
  auto engine = host_engine<Plan, T, Opt>(run);
  set_weights(engine);
  Outcome outcome;
  host_steps<T>(engine, run, 0, run.steps, outcome);
  return finish(engine, std::move(outcome));
}

// Where: OnTheDevice (every state in device memory) or a placement that offloads the optimizer
// states (offload_test.cpp).
template <class Plan, class T, class Where = OnTheDevice, class Opt = zero::Adam>
Outcome train_on_device(StagedSetup& s, const Scenario& run) {
  // example-begin device-engine
  // world(): a host MpiCommunicator (the engine's own collectives); s.comm: a StagedCommunicator
  // of the same ranks (the model states); s.compute(): the stream the stores queue their work on.
  // Where: zero::Placement<zero::execute_on<DeviceSpace>> for every state in device memory.
  zero::Engine<Plan, Staged, Where, Opt, zero::StaticLossScaler, zero::ComputeTypes<T>> engine(
      world(), s.comm, model(), make_optimizer<Opt>(), zero::StaticLossScaler{}, options_for(run),
      s.compute());
  // example-end device-engine
  set_weights(engine);
  Outcome outcome;
  device_steps<T>(s, engine, run, 0, run.steps, outcome);
  return finish(engine, std::move(outcome));
}

inline void expect_same_weights(const Outcome& device, const Outcome& host,
                                const std::string& what) {
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

// The norms of the two runs: the host's bits over the twin (the host's kernels); within fp64
// rounding of the host's sum over CUDA, which adds its blocks' partial sums in another order. A
// skipped step's norm is not finite on both.
inline void expect_same_norms(const Outcome& device, const Outcome& host, const std::string& what) {
  ASSERT_EQ(device.norms.size(), host.norms.size());
  for (std::size_t k = 0; k < host.norms.size(); ++k) {
    EXPECT_EQ(device.applied[k], host.applied[k]) << what << ": step " << k << " applied";
    if (!std::isfinite(host.norms[k])) {
      EXPECT_FALSE(std::isfinite(device.norms[k])) << what << ": the norm of step " << k;
      continue;
    }
#if ZERO_TEST_TWIN
    EXPECT_EQ(std::bit_cast<std::uint64_t>(device.norms[k]),
              std::bit_cast<std::uint64_t>(host.norms[k]))
#else
    EXPECT_NEAR(device.norms[k], host.norms[k], 1e-12 * host.norms[k])
#endif
        << what << ": the norm of step " << k << ": " << device.norms[k] << " against "
        << host.norms[k];
  }
}

template <class Plan, class T, class Where = OnTheDevice, class Opt = zero::Adam>
void expect_device_engine_equals_host(StagedSetup& s, const Scenario& run,
                                      const std::string& what) {
  SCOPED_TRACE(what);
  const Outcome host = train_on_host<Plan, T, Opt>(run);
  const Outcome device = train_on_device<Plan, T, Where, Opt>(s, run);
  expect_same_norms(device, host, what);
  EXPECT_NE(device.weights[2][0], initial_value(2, 0)) << what << ": it trained";
  expect_same_weights(device, host, what);
}

template <class T, class Where = OnTheDevice>
void every_stage(StagedSetup& s, const Scenario& run, const std::string& placement = "") {
  const std::string what = placement + std::string(zero::to_string(run.dtype)) + ", micro-steps " +
                           std::to_string(run.accumulation) + ", stage ";
  expect_device_engine_equals_host<zero::Stage<0>, T, Where>(s, run, what + "0");
  expect_device_engine_equals_host<zero::Stage<1>, T, Where>(s, run, what + "1");
  expect_device_engine_equals_host<zero::Stage<2>, T, Where>(s, run, what + "2");
  expect_device_engine_equals_host<zero::Stage<3>, T, Where>(s, run, what + "3");
}

// Why this machine's kernel refuses the NVMe tier's io_uring, if it does: building the engine says
// so. A GPU machine is a container whose kernel may refuse it, and the case cannot run there (the
// reason goes to the log) while the binary's other tests must still count; in CI the twin runs it
// on every commit. Use: if (const auto why = io_uring_refused<...>(s, run)) GTEST_SKIP() << ...
template <class Plan, class Where>
std::optional<std::string> io_uring_refused(StagedSetup& s, const Scenario& run) {
  try {
    zero::EngineOptions probe = options_for(run);
    DeviceEngine<Plan, zero::bfloat16, Where> engine(world(), s.comm, model(), adam(),
                                                     zero::StaticLossScaler{}, probe, s.compute());
  } catch (const zero::Error& e) {
    if (std::string(e.what()).find("needs io_uring") != std::string::npos) return e.what();
    throw;
  }
  return std::nullopt;
}

// A directory of the same name on every rank (one machine), removed at the end.
struct SharedDir {
  std::filesystem::path path;
  explicit SharedDir(const std::string& prefix = "zero-device-engine-") {
    std::vector<std::int64_t> n{std::int64_t(std::random_device{}() & 0x7fffffff)};
    world().broadcast(n, 0).wait();
    path = std::filesystem::temp_directory_path() / (prefix + std::to_string(n[0]));
    if (world().rank() == 0) std::filesystem::create_directories(path);
    world().barrier();
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  ~SharedDir() {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(path);
  }
};

} // namespace device_engine_test
