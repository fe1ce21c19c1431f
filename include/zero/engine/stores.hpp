#pragma once
// The contracts of the engine's three stores (engine/model_states.hpp calls nothing else), named so
// that a new store (another placement, another execution space) states what it must provide and
// hears what it lacks in zero's words. The stores in memory are engine/replicated_parameters.hpp,
// sharded_parameters.hpp, gradient_store.hpp and optimizer_store.hpp; on NVMe, offload/.
//
// What the concepts cannot spell out (member templates over the caller's lambdas):
//   - OptimizerStateStore: `layer(shard, l)` (a layer's fp32 weights, gathered),
//     `step(update, grad_multiplier, grads(l), out(l), done(l))` (the update, layer by layer),
//     and for a TrustRatioUpdate (LAMB) `step(shard, update, ...)`, which combines the
//     per-parameter sums over the shard group (the memory store has it; the NVMe store does not),
//     `read_states(f)` / `write_states(f)` (checkpoints, f(tensor, layer, part, values)).
//   - GradientStorage: `visit_reduced(f)` (f(reduced tensor) with its element type).

#include "zero/core/view.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/report.hpp"
#include "zero/shard/shard_layout.hpp"

#include <concepts>
#include <cstddef>

namespace zero {

// A view of T in the memory the stores hand out: host for host-accessible memory, a device's own
// memory space for states there (zero::HandedOutMemory); only that space's kernels and copies take
// the latter.
template <class V, class T>
concept HandedOutView = std::same_as<V, View<T, typename V::memory_space>> &&
    std::same_as<typename V::memory_space, HandedOutMemory<typename V::memory_space>>;

// The compute copy of the parameters: set, acquired for forward and backward, written by the
// update layer by layer (update_target, layer_updated) between begin_update and end_update (which
// shares the new weights), and reported.
template <class S, class T>
concept ParameterStore = requires(S& s, const S& cs, std::size_t l, View<const float> values) {
  s.set_layer(l, values);
  { s.acquire(l) } -> std::same_as<LayerParameters>;
  cs.require_nothing_acquired();
  s.begin_update();
  { s.update_target(l) } -> HandedOutView<T>;
  s.layer_updated(l);
  s.end_update();
  s.end_step();
  { cs.gather_exposed_seconds() } -> std::convertible_to<double>;
  { cs.gather_counts() } -> std::same_as<GatherCounts>;
  { cs.nvme_traffic() } -> std::same_as<IoStats>;
  { cs.parameter_bytes() } -> std::same_as<StateBytes>;
  { cs.buffer_bytes() } -> std::convertible_to<std::size_t>;
};

// Where backward writes a layer's gradient, handed over when ready (reduced, or accumulated over
// micro-steps), finished at the step, averaged over replica groups, and cleared after it.
template <class S, class T, class Comm>
concept GradientStorage = requires(S& s, const S& cs, std::size_t l, MicroSteps::Arrival arrival,
                                   Comm& replica) {
  { s.gradients(l) } -> HandedOutView<T>;
  s.ready(l, arrival);
  s.finish();
  s.average_over_replicas(replica);
  { s.local_sum_of_squares() } -> std::convertible_to<double>;
  s.clear();
  { cs.stats() } -> std::convertible_to<const ReducerStats&>;
  { cs.gradient_bytes() } -> std::convertible_to<std::size_t>;
  { cs.buffer_bytes() } -> std::convertible_to<std::size_t>;
};

// fp32 master weights and optimizer states: set, updated (see above), saved and loaded through the
// layout and rank it keeps them for, and reported.
template <class S>
concept OptimizerStateStore = requires(S& s, const S& cs, std::size_t l, View<const float> values) {
  s.set_layer(l, values);
  { cs.kept_layout() } -> std::convertible_to<const ShardLayout&>;
  { cs.kept_rank() } -> std::convertible_to<int>;
  { cs.master_bytes() } -> std::same_as<StateBytes>;
  { cs.state_bytes() } -> std::same_as<StateBytes>;
  { cs.nvme_traffic() } -> std::same_as<IoStats>;
  { cs.buffer_bytes() } -> std::convertible_to<std::size_t>;
};

} // namespace zero
