#pragma once
// The engine tests' training scenario: a model of awkward layer sizes, a synthetic backward that
// reads the acquired weights (so stage 3's gathers are exercised) and depends on the rank, and a
// loop that trains it with any plan and placement, returning the final weights and the reports.

#include "comm_test.hpp"

#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace zero::testing {

using zero::DType;

// Layers of awkward sizes: a weight and a bias each, one tiny, one large; and, when asked, a
// sixth layer with a weight of `wide_layer` elements (to be cut into several NVMe sub-groups).
inline std::vector<zero::ParameterSpec> model(std::size_t wide_layer = 0) {
  const std::size_t shapes[][2] = {{12 * 7, 12}, {5, 1}, {40 * 33, 40}, {3, 3}, {257 * 8, 8}};
  std::vector<zero::ParameterSpec> params;
  for (int l = 0; l < 5; ++l) {
    params.push_back({"layer" + std::to_string(l) + ".weight", shapes[l][0], DType::float32, l});
    params.push_back({"layer" + std::to_string(l) + ".bias", shapes[l][1], DType::float32, l});
  }
  if (wide_layer > 0) {
    params.push_back({"layer5.weight", wide_layer, DType::float32, 5});
    params.push_back({"layer5.bias", 7, DType::float32, 5});
  }
  return params;
}

inline std::vector<zero::ParameterSpec> marked(std::vector<zero::ParameterSpec> params,
                                               int fp32_moment_layer) {
  for (auto& p : params)
    p.fp32_moments = p.layer == fp32_moment_layer;
  return params;
}

inline float initial_value(std::size_t layer, std::size_t i) {
  return static_cast<float>(std::sin(0.37 * double(i) + double(layer))) * 0.5f;
}

// Rank r's gradient of element i at `step`, micro-step `micro`: depends on the weight, so every
// stage must see the same weights to agree.
inline float gradient_value(float weight, int rank, int step, int micro, std::size_t layer,
                            std::size_t i) {
  const float noise = static_cast<float>(((i * 13 + layer * 7 + std::size_t(rank) * 31 +
                                           std::size_t(step) * 17 + std::size_t(micro) * 5) %
                                          97)) /
                          97.0f -
                      0.5f;
  return 0.3f * weight + noise;
}

struct Scenario {
  DType dtype = DType::float32;
  int accumulation = 1;
  double clipping = 0;
  bool deterministic = true;
  std::size_t bucket = 50;
  int steps = 4;
  float scale = 1;             // gradients are multiplied by this (the "scaled loss")
  int infinity_step = -1;      // rank ranks-1 sees an infinity in layer 2 at this step
  std::size_t persistence = 0; // stage 3
  std::size_t wide_layer = 0;  // see model()
  int fp32_moment_layer = -1;  // its parameters are marked ParameterSpec::fp32_moments
};

struct Outcome {
  std::vector<std::vector<float>> weights;
  std::vector<zero::StepResult> steps;
  zero::MemoryReport memory;
  double paper_bytes = 0;
  std::size_t psi = 0, padded = 0;
  std::size_t last_layer_padded = 0;   // the last layer's flat size
  std::vector<std::size_t> flat_sizes; // every layer's
};

template <class T>
void write_gradients(zero::View<T> out, zero::View<const T> weights, const Scenario& run, int rank,
                     int step, int micro, std::size_t layer, int ranks) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    float g =
        gradient_value(zero::convert<float>(weights[i]), rank, step, micro, layer, i) * run.scale;
    if (step == run.infinity_step && rank == ranks - 1 && layer == 2 && i == 5)
      g = std::numeric_limits<float>::infinity();
    out[i] = zero::convert<T>(g);
  }
}

// Options the scenario does not set (the NVMe tier, say) come from `base`; the ranks talk over
// `comm` (the world when null).
template <class Plan, class Where = zero::host, class Optimizer = zero::Adam,
          class Scaler = zero::StaticLossScaler, class Compute = zero::AllComputeTypes>
Outcome train(const Scenario& run, Scaler scaler = Scaler{}, zero::EngineOptions base = {},
              zero::MpiCommunicator* comm = nullptr) {
  auto& world = comm ? *comm : zero::testing::world();
  zero::EngineOptions options = base;
  options.compute_dtype = run.dtype;
  options.gradient_accumulation_steps = run.accumulation;
  options.gradient_clipping = run.clipping;
  options.deterministic = run.deterministic;
  options.reduce_bucket_elements = run.bucket;
  options.persistence_threshold = run.persistence;
  Optimizer optimizer(typename Optimizer::options_type{.lr = 0.01, .weight_decay = 0.01});
  zero::Engine<Plan, zero::MpiCommunicator, Where, Optimizer, Scaler, Compute> engine(
      world, marked(model(run.wide_layer), run.fp32_moment_layer), optimizer, scaler, options);
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> init(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < init.size(); ++i)
      init[i] = initial_value(l, i);
    engine.set_layer(l, init);
  }
  Outcome outcome;
  zero::visit_dtype(run.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (zero::GradientElement<T>) {
      for (int step = 0; step < run.steps; ++step) {
        for (int micro = 0; micro < run.accumulation; ++micro) {
          for (std::size_t l = 0; l < engine.layers(); ++l)
            (void)engine.acquire(l); // "forward"
          for (std::size_t l = engine.layers(); l-- > 0;) {
            auto weights = engine.acquire(l);
            write_gradients<T>(engine.template gradients<T>(l), weights.template values<T>(), run,
                               world.rank(), step, micro, l, world.size());
            engine.grads_ready(l);
          }
        }
        outcome.steps.push_back(engine.step());
      }
    }
  });
  for (std::size_t l = 0; l < engine.layers(); ++l)
    outcome.weights.push_back(engine.get_layer(l));
  outcome.memory = engine.memory();
  outcome.paper_bytes = engine.paper_model_state_bytes();
  outcome.psi = engine.layout().numel();
  for (std::size_t l = 0; l < engine.layers(); ++l) {
    outcome.padded += engine.layout().layer(l).flat_numel;
    outcome.flat_sizes.push_back(engine.layout().layer(l).flat_numel);
  }
  outcome.last_layer_padded = engine.layout().layer(engine.layers() - 1).flat_numel;
  return outcome;
}

inline void expect_same_weights(const Outcome& a, const Outcome& b, bool bitwise,
                                const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t l = 0; l < a.weights.size(); ++l)
    for (std::size_t i = 0; i < a.weights[l].size(); ++i) {
      const float x = a.weights[l][i], y = b.weights[l][i];
      if (bitwise)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(x), std::bit_cast<std::uint32_t>(y))
            << what << ": layer " << l << " element " << i << ": " << x << " vs " << y;
      else
        ASSERT_NEAR(x, y, 1e-6 * std::max(1.0f, std::abs(x)))
            << what << ": layer " << l << " element " << i;
    }
}

template <class Call>
void expect_error_contains(Call&& call, const std::string& needle) {
  try {
    call();
    FAIL() << "expected: " << needle;
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

} // namespace zero::testing
