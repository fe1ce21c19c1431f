#pragma once
// Training through zero::Engine under any sharding plan, with a synthetic backward, so that one
// model can be trained under two plans and the final weights compared. The engine takes a
// user-written partitioner as it takes the built-in ones: `zero::partition_with<KeepSmallWhole>`
// in the plan, and blocks of different sizes are reduced and gathered with per-rank counts.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

struct Trained {
  zero::ShardLayout layout;                      // how the plan's partitioner split the model
  std::vector<std::int64_t> model_state_bytes;   // per rank: weights, gradients, master, moments
  std::vector<std::vector<float>> final_weights; // per layer, fp32 master weights
};

namespace synthetic {

inline float initial_weight(std::size_t layer, std::size_t i) {
  return 0.5f * static_cast<float>(std::sin(0.37 * static_cast<double>(i) + double(layer)));
}

// What backward would write for element i of a layer: it depends on the weight the rank acquired
// (so stage 3's gathers must deliver the right values) and on the rank (as its data would), so the
// reduction across ranks matters too.
inline float gradient(float weight, int rank, int step, std::size_t layer, std::size_t i) {
  const std::size_t noise =
      (i * 13 + layer * 7 + std::size_t(rank) * 31 + std::size_t(step) * 17) % 97;
  return 0.3f * weight + static_cast<float>(noise) / 97.0f - 0.5f;
}

} // namespace synthetic

// One value per rank, on every rank (a sum in which each rank fills its own slot).
inline std::vector<std::int64_t> per_rank(zero::MpiCommunicator& comm, std::size_t value) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()), 0);
  all[static_cast<std::size_t>(comm.rank())] = static_cast<std::int64_t>(value);
  comm.all_reduce(all, zero::ReduceOp::sum).wait();
  return all;
}

// Trains `parameters` for `steps` steps under Plan, with fp32 weights and Adam. Collective: every
// rank calls it with the same parameters.
template <class Plan>
Trained train(zero::MpiCommunicator& comm, const std::vector<zero::ParameterSpec>& parameters,
              int steps) {
  zero::EngineOptions options;
  options.deterministic = true;            // sums in rank order: plans agree bit for bit
  options.reduce_bucket_elements = 16'384; // several buckets per step, reduced during backward
  zero::Engine<Plan, zero::MpiCommunicator, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, parameters, zero::Adam({.lr = 1e-2}), zero::StaticLossScaler{}, options);

  for (std::size_t l = 0; l < engine.layers(); ++l) {
    std::vector<float> values(engine.layout().layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = synthetic::initial_weight(l, i);
    engine.set_layer(l, values);
  }

  for (int step = 0; step < steps; ++step) {
    for (std::size_t l = 0; l < engine.layers(); ++l)
      (void)engine.acquire(l); // forward: stage 3 gathers each layer while it is used
    for (std::size_t l = engine.layers(); l-- > 0;) {
      const zero::LayerParameters weights = engine.acquire(l);
      const zero::View<const float> w = weights.values<float>();
      zero::View<float> grad = engine.template gradients<float>(l);
      for (std::size_t i = 0; i < grad.size(); ++i)
        grad[i] = synthetic::gradient(w[i], comm.rank(), step, l, i);
      engine.grads_ready(l); // reduced into the owners' blocks while backward goes on
    }
    engine.step();
  }

  Trained trained{engine.layout(), per_rank(comm, engine.memory().model_states()), {}};
  for (std::size_t l = 0; l < engine.layers(); ++l)
    trained.final_weights.push_back(engine.get_layer(l));
  return trained;
}
