#pragma once
// The contracts of the engine's three stores (engine/model_states.hpp calls nothing else), named so
// that a new store (another placement, another execution space) states what it must provide and
// hears what it lacks in zero's words: ParameterStoreType, GradientStoreType, OptimizerStoreType.
// The stores in memory are engine/replicated_parameters.hpp, sharded_parameters.hpp,
// gradient_store.hpp and optimizer_store.hpp; on NVMe and behind a device, offload/.
//
// The operations that take the engine's own callables (the update's per-layer gradients, targets
// and completions, the checkpoints' visitors) are checked with stand-in callables of the same
// shape (detail::stand_in), which the concepts only name: what is checked is that the store
// accepts such a call, not what it does with it.

#include "zero/core/view.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <concepts>
#include <cstddef>
#include <vector>

namespace zero {

namespace detail::stand_in {
// f(l) giving an R: a layer's gradients, the target of its update, or (void) its completion.
template <class R>
struct LayerFunction {
  R operator()(std::size_t layer) const;
};
// Checkpoints: f(tensor, layer, part, values) reads part of a state; the writer fills `into`.
struct StateReader {
  void operator()(std::size_t tensor, std::size_t layer, Range part,
                  View<const float> values) const;
};
struct StateWriter {
  void operator()(std::size_t tensor, std::size_t layer, Range part, View<float> into) const;
};
// f(reduced) with the reduced gradient's tensor, whatever its element type.
struct ReducedVisitor {
  template <class Tensor>
  void operator()(Tensor& reduced) const;
};
} // namespace detail::stand_in

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
concept ParameterStoreType = requires(S& s, const S& cs, std::size_t l, View<const float> values) {
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
// micro-steps), finished at the step, averaged over replica groups, read by the update through
// visit_reduced (in the compute type or float), and cleared after it.
template <class S, class T, class Comm>
concept GradientStoreType = requires(S& s, const S& cs, std::size_t l, MicroSteps::Arrival arrival,
                                     Comm& replica, detail::stand_in::ReducedVisitor visit) {
  { s.gradients(l) } -> HandedOutView<T>;
  s.ready(l, arrival);
  s.finish();
  s.average_over_replicas(replica);
  { s.local_sum_of_squares() } -> std::convertible_to<double>;
  s.visit_reduced(visit);
  s.clear();
  { cs.stats() } -> std::convertible_to<const ReducerStats&>;
  { cs.gradient_bytes() } -> std::convertible_to<std::size_t>;
  { cs.buffer_bytes() } -> std::convertible_to<std::size_t>;
};

// fp32 master weights and optimizer states: set; gathered layer by layer over `Group` (the shard
// group's communicator it keeps them over); updated, layer by layer, from Grad views of the
// reduced gradient into Target views of the compute copy (an element-wise optimizer's step, or a
// trust-ratio one's, which combines per-parameter sums over the group); read and written for
// checkpoints through the layout and rank it keeps them for; reported.
template <class S, class Opt, class Group, class Grad, class Target>
concept OptimizerStoreType = requires(S& s, const S& cs, Group& group, std::size_t l,
                                      View<const float> values, detail::stand_in::StateReader read,
                                      detail::stand_in::StateWriter write) {
  s.set_layer(l, values);
  { s.layer(group, l) } -> std::same_as<std::vector<float>>;
  s.read_states(read);
  s.write_states(write);
  { cs.kept_layout() } -> std::convertible_to<const ShardLayout&>;
  { cs.kept_rank() } -> std::convertible_to<int>;
  { cs.master_bytes() } -> std::same_as<StateBytes>;
  { cs.state_bytes() } -> std::same_as<StateBytes>;
  { cs.nvme_traffic() } -> std::same_as<IoStats>;
  { cs.buffer_bytes() } -> std::convertible_to<std::size_t>;
}
&&requires(S& s, Group& group, const typename Opt::update_type& update, float multiplier,
           detail::stand_in::LayerFunction<Grad> grads, detail::stand_in::LayerFunction<Target> out,
           detail::stand_in::LayerFunction<void> done) {
  requires(ElementwiseUpdate<typename Opt::update_type> &&
           requires { s.step(update, multiplier, grads, out, done); }) ||
      (TrustRatioUpdate<typename Opt::update_type> &&
       requires { s.step(group, update, multiplier, grads, out, done); });
};

} // namespace zero
