#pragma once
// The checkpoint tests' scenario: a model of awkward sizes with shapes, a directory every rank
// agrees on, a training loop whose gradients depend on the step (so a resumed run must continue
// exactly where the saved one stopped), and a checkpoint's contents read whole for comparisons.
// Its engines scale the loss as the prebuilt ones do (AnyLossScaler), so that Engine<Stage<S>>
// with Adam, AdamW, SGD or Lamb is a prebuilt engine (zero/engines.hpp): a test that links
// zero::engines compiles none of their code. A test that names another engine (another
// partitioner, scaler or placement) includes <zero/engine/engine.hpp> for it.

#include "comm_test.hpp"

#include <zero/checkpoint/directory.hpp>
#include <zero/checkpoint/reshard.hpp>
#include <zero/engines.hpp>
#include <zero/optim/adam.hpp>
#include <zero/precision/gradient_element.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::testing::checkpoints {

namespace fs = std::filesystem;
using zero::DType;
using zero::MpiCommunicator;

inline std::vector<zero::ParameterSpec> model() {
  const std::size_t shapes[][3] = {{12, 7, 12}, {5, 1, 5}, {40, 33, 40}, {3, 1, 3}, {257, 8, 8}};
  std::vector<zero::ParameterSpec> params;
  for (int l = 0; l < 5; ++l) {
    const auto* s = shapes[l];
    params.push_back(
        {"layer" + std::to_string(l) + ".weight", s[0] * s[1], DType::float32, l, {s[0], s[1]}});
    params.push_back({"layer" + std::to_string(l) + ".bias", s[2], DType::float32, l, {s[2]}});
  }
  return params;
}

// A directory every rank of `comm` agrees on, removed by rank 0 at the end.
struct SharedDir {
  fs::path path;
  MpiCommunicator* comm;
  explicit SharedDir(MpiCommunicator& c) : comm(&c) {
    std::vector<std::int64_t> n{std::int64_t(std::random_device{}() & 0x7fffffff)};
    c.broadcast(n, 0).wait();
    path = fs::temp_directory_path() / ("zero-checkpoint-test-" + std::to_string(n[0]));
    if (c.rank() == 0) fs::create_directories(path);
    c.barrier();
  }
  ~SharedDir() {
    comm->barrier();
    if (comm->rank() == 0) fs::remove_all(path);
  }
};

struct Run {
  DType dtype = DType::float32;
  int overflow_step = -1; // the last rank sees an infinity at this step
};

template <class Plan, class Opt = zero::Adam, class Scaler = zero::AnyLossScaler,
          class Where = zero::host>
using Engine = zero::Engine<Plan, MpiCommunicator, Where, Opt, Scaler>;

// No loss scaling (a static scale of 1) as a scaler of type S holds it; S() for another scaler.
template <class S>
S default_scaler() {
  if constexpr (std::is_same_v<S, zero::AnyLossScaler>)
    return zero::AnyLossScaler(zero::StaticLossScaler());
  else
    return S();
}

template <class E>
void initialise(E& engine) {
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> init(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < init.size(); ++i)
      init[i] = static_cast<float>(std::sin(0.37 * double(i) + double(l))) * 0.5f;
    engine.set_layer(l, init);
  }
}

// Steps [from, to): gradients depend on the step, the rank's position and the weights, and are
// scaled by the engine's loss scale, as a scaled loss's would be.
template <class E>
void train(E& engine, int from, int to, int rank, int ranks, const Run& run = {}) {
  engine.visit_compute_type([&](auto tag) {
    using T = decltype(tag);
    if constexpr (zero::GradientElement<T>) {
      for (int step = from; step < to; ++step) {
        for (std::size_t l = 0; l < engine.layers(); ++l)
          (void)engine.acquire(l);
        for (std::size_t l = engine.layers(); l-- > 0;) {
          auto weights = engine.acquire(l);
          const auto w = weights.template values<T>();
          auto out = engine.template gradients<T>(l);
          for (std::size_t i = 0; i < out.size(); ++i) {
            const float noise =
                float((i * 13 + l * 7 + std::size_t(rank) * 31 + std::size_t(step) * 17) % 97) /
                    97.0f -
                0.5f;
            float g = (0.3f * zero::convert<float>(w[i]) + noise) * float(engine.loss_scale());
            if (step == run.overflow_step && rank == ranks - 1 && l == 2 && i == 5)
              g = std::numeric_limits<float>::infinity();
            out[i] = zero::convert<T>(g);
          }
          engine.grads_ready(l);
        }
        (void)engine.step();
      }
    }
  });
}

template <class E>
std::vector<std::vector<float>> weights(E& engine) {
  std::vector<std::vector<float>> all;
  for (std::size_t l = 0; l < engine.layers(); ++l)
    all.push_back(engine.get_layer(l));
  return all;
}

inline void expect_bitwise(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t l = 0; l < a.size(); ++l) {
    ASSERT_EQ(a[l].size(), b[l].size());
    for (std::size_t i = 0; i < a[l].size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[l][i]), std::bit_cast<std::uint32_t>(b[l][i]))
          << what << ": layer " << l << " element " << i << ": " << a[l][i] << " vs " << b[l][i];
  }
}

// Every tensor of every parameter of a checkpoint, read whole: how two checkpoints are compared.
inline std::vector<std::vector<float>> contents(const fs::path& dir) {
  const auto m = zero::checkpoint::read_manifest(dir);
  zero::checkpoint::StateReader reader(dir, m);
  std::vector<std::vector<float>> all;
  for (std::size_t t = 0; t < m.tensors(); ++t)
    for (std::size_t p = 0; p < m.parameters.size(); ++p) {
      std::vector<float> v(m.parameters[p].numel);
      reader.read_parameter(t, p, {0, v.size()}, v.data());
      all.push_back(std::move(v));
    }
  return all;
}

template <class E>
E make(MpiCommunicator& comm, DType dtype,
       typename E::scaler_type scaler = default_scaler<typename E::scaler_type>(),
       zero::EngineOptions options = {}) {
  options.compute_dtype = dtype;
  options.deterministic = true;
  options.reduce_bucket_elements = 300;
  return E(comm, model(), typename E::optimizer_type({.lr = 0.01, .weight_decay = 0.01}), scaler,
           options);
}

inline zero::DynamicLossScaler small_dynamic_scaler() {
  zero::DynamicLossScalerOptions o;
  o.init_scale = 1024;
  o.scale_window = 2; // the scale moves within a few steps, so its state matters
  o.hysteresis = 2;
  return zero::DynamicLossScaler(o);
}

} // namespace zero::testing::checkpoints
