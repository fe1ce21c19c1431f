#pragma once
// ModelStates<T, ...>: the three stores of one engine for compute type T, chosen by the plan and
// the placement, and the few steps that need more than one of them:
//   - a parameter store: the compute copy, replicated (stages 0-2) or sharded and gathered per
//     layer (stage 3);
//   - a gradient store: where backward writes, accumulation, bucketed reduction;
//   - an optimizer store: fp32 master weights and moments, and the update, in memory or on NVMe.
// The engine owns one of these for the compute type chosen at run time; everything below is typed.

#include "zero/core/nvme.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/gradient_store.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/optimizer_choice.hpp"
#include "zero/engine/optimizer_store.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/replicated_parameters.hpp"
#include "zero/engine/report.hpp"
#include "zero/engine/sharded_parameters.hpp"
#include "zero/engine/split_masters.hpp"
#include "zero/engine/stores.hpp"
#include "zero/stage/placement.hpp"

#include <concepts>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

namespace detail {
// The stores for each place, given how they keep their states (engine/kept.hpp). Memory here; the
// NVMe tier's stores are in <zero/offload/nvme_stores.hpp>, which a program placing states on
// zero::nvme includes (with the zero::nvme link target): without it these specialisations stay
// incomplete types. So does ZeRO-Offload's (optimizer states in host memory beside a device
// space), which <zero/offload/offloaded_optimizer_store.hpp> defines.
template <Optimizer Opt, KeptState K, ExecutionSpace Exec>
struct optimizer_store_for {
  using type = OptimizerStore<Opt, K, Exec>;
};
template <Optimizer Opt, KeptState K, ExecutionSpace Exec>
requires offloaded_from<typename K::space, Exec>
struct optimizer_store_for<Opt, K, Exec>;
template <Optimizer Opt, class Partitioner, ExecutionSpace Exec>
struct optimizer_store_for<Opt, Kept<true, Partitioner, nvme>, Exec>;

// K: how the parameters are kept; Updated: how the optimizer states are (what a step updates).
template <Element T, KeptState K, KeptState Updated, Communicator Comm, ExecutionSpace Exec,
          bool = K::sharded>
struct parameter_store_for {
  using type = ShardedParameters<T, K, Comm, Exec>;
};
template <Element T, KeptState K, KeptState Updated, Communicator Comm, ExecutionSpace Exec>
struct parameter_store_for<T, K, Updated, Comm, Exec, false> {
  using type = ReplicatedParameters<T, Updated, Comm, typename K::space, Exec>;
};
template <Element T, class Partitioner, KeptState Updated, Communicator Comm, ExecutionSpace Exec>
struct parameter_store_for<T, Kept<true, Partitioner, nvme>, Updated, Comm, Exec, true>;
// Stage 3's shards in host memory beside a device space: <zero/offload/offloaded_parameters.hpp>.
template <Element T, KeptState K, KeptState Updated, Communicator Comm, ExecutionSpace Exec>
requires parameters_streamed_from<typename K::space, Exec>
struct parameter_store_for<T, K, Updated, Comm, Exec, true>;

// Whether a store's specialisation is defined: the header that defines it was included.
template <class For>
concept defined_store = requires {
  typename For::type;
};

template <class Space>
constexpr const char* place_name() {
  if constexpr (std::same_as<Space, nvme>)
    return nvme::space_name;
  else
    return Space::name;
}
} // namespace detail

// Comm moves the model states; Control the host values of LAMB's per-parameter sums (the same
// communicator on the host; a host one beside a communicator of device memory).
template <Element T, ShardingPlanType Plan, Communicator Comm, PlacementType Where, Optimizer Opt,
          Communicator Control = Comm>
class ModelStates {
  using Exec = typename Where::execution_space;
  // Of the views handed to the caller and between the stores: host for host-accessible memory.
  using GradientMemory = HandedOutMemory<typename Where::gradients>;
  // How each state is kept, from the plan and the placement: the stores read neither.
  using KeptParams = KeptParameters<Plan, typename Where::parameters>;
  using KeptOptimizer = KeptOptimizerStates<Plan, typename Where::optimizer_states>;
  // Refused where the types meet (engine/optimizer_choice.hpp); a program that takes its optimizer
  // from a config compiles only those its placement runs (zero::with_optimizer_on).
  static_assert(detail::optimizer_refusal<Opt, Where>() != detail::lamb_on_nvme,
                "zero: an optimizer with a trust ratio (LAMB) keeps its states in memory: its step "
                "on the NVMe tier is not built");
  static_assert(detail::optimizer_refusal<Opt, Where>() != detail::lamb_over_a_device,
                "zero: an optimizer with a trust ratio (LAMB) keeps its states in host memory: its "
                "step over states in device memory is not built (offload them: "
                "zero::optimizer_states_in<zero::pinned_host>)");
  // The stores defined in offload/, whose headers a program includes when its placement needs them.
  static constexpr bool offloaded_to_memory =
      detail::offloaded_from<typename Where::optimizer_states, Exec> &&
      !std::same_as<typename Where::optimizer_states, nvme>;
  static constexpr bool parameters_offloaded_to_memory =
      detail::parameters_streamed_from<typename Where::parameters, Exec>;
  static constexpr bool optimizer_store_defined =
      detail::defined_store<detail::optimizer_store_for<Opt, KeptOptimizer, Exec>>;
  static constexpr bool parameter_store_defined =
      detail::defined_store<detail::parameter_store_for<T, KeptParams, KeptOptimizer, Comm, Exec>>;
  static_assert(optimizer_store_defined || !offloaded_to_memory,
                "zero: this placement offloads the optimizer states from a device to host memory "
                "(ZeRO-Offload): include <zero/offload/offloaded_optimizer_store.hpp>");
  static_assert(parameter_store_defined || !parameters_offloaded_to_memory,
                "zero: this placement keeps stage 3's parameters in host memory beside a device "
                "(offload_param): include <zero/offload/offloaded_parameters.hpp>");
  static_assert((optimizer_store_defined || offloaded_to_memory) &&
                    (parameter_store_defined || parameters_offloaded_to_memory),
                "zero: this placement keeps states on the NVMe tier: include "
                "<zero/offload/nvme_stores.hpp> (and link zero::nvme)");
  using Parameters =
      typename detail::parameter_store_for<T, KeptParams, KeptOptimizer, Comm, Exec>::type;
  // The reduced gradient is kept as the optimizer states are (they are updated together), in the
  // gradients' space; backward's gradient as the plan keeps gradients.
  using Gradients = GradientStore<T, KeptOptimizerStates<Plan, typename Where::gradients>,
                                  KeptGradients<Plan, typename Where::gradients>, Comm, Exec>;
  using OptimizerStates = typename detail::optimizer_store_for<Opt, KeptOptimizer, Exec>::type;
  // ZeRO-Offload: the optimizer states on the host beside a device space. Their store moves host
  // memory, so it is given the host communicator of the shard group.
  static constexpr bool offloaded = detail::offloaded_from<typename Where::optimizer_states, Exec>;
  using OptimizerGroup = std::conditional_t<offloaded, Control, Comm>;
  static_assert(ParameterStoreType<Parameters, T>,
                "zero: the parameter store of this placement does not provide the contract the "
                "engine calls (zero::ParameterStoreType, engine/stores.hpp)");
  static_assert(GradientStoreType<Gradients, T, Comm>,
                "zero: the gradient store of this placement does not provide the contract the "
                "engine calls (zero::GradientStoreType, engine/stores.hpp)");
  // The update reads the reduced gradient in the compute type or in float.
  template <class G>
  using ReducedView = View<const G, GradientMemory>;
  using TargetView = decltype(std::declval<Parameters&>().update_target(std::size_t{}));
  static_assert(
      OptimizerStoreType<OptimizerStates, Opt, OptimizerGroup, ReducedView<T>, TargetView> &&
          OptimizerStoreType<OptimizerStates, Opt, OptimizerGroup, ReducedView<float>, TargetView>,
      "zero: the optimizer store of this placement does not provide the contract the engine "
      "calls (zero::OptimizerStoreType, engine/stores.hpp)");

 public:
  using value_type = T;

  // `shard` and `control`: the shard group's communicators (the same one for a host engine).
  // `hpz`: the group of stage 3's secondary weight copy (EngineOptions::hpz_partition_size), or
  // null. `exec`: where the stores queue their kernels (the caller's compute stream).
  ModelStates(Comm& shard, Control& control, const ModelLayout& model, const EngineOptions& options,
              Comm* hpz = nullptr, Exec exec = {})
      : shard_(shard), control_(control), exec_(exec),
        parameters_(parameter_store(shard, control, model, options, hpz, exec)),
        gradients_(shard, model, options, exec),
        optimizer_(optimizer_group(shard, control), model, options, exec) {
    // Split masters read their high parts from the compute copy (engine/split_masters.hpp).
    using ComputeBlock = SplitComputeBlock<typename TargetView::memory_space>;
    if constexpr (SplitComputeType<T> && requires(OptimizerStates & o) {
                    o.bind_compute_copy(std::function<ComputeBlock(std::size_t)>{});
                  })
      optimizer_.bind_compute_copy(
          [this](std::size_t l) -> ComputeBlock { return parameters_.update_target(l); });
    // What only the options decide is refused here, the same on every rank.
    if constexpr (std::same_as<typename Where::parameters, nvme>)
      if (options.master != MasterStorage::fp32)
        fail_on_every_rank(
            ErrorKind::unsupported,
            std::string("engine: split master weights (EngineOptions::master = ") +
                to_string(options.master) +
                ") read their high parts from the compute copy in memory; with the parameters "
                "on NVMe (offload_param) the step writes a staging buffer instead: keep the "
                "parameters in memory, or fp32 master weights");
    if (options.speculative_update) {
      if constexpr (!offloaded)
        fail_on_every_rank(ErrorKind::unsupported,
                           "speculative_update: the speculative update runs the CPU's update "
                           "during the device's backward; it needs the optimizer states offloaded "
                           "from a device (docs/zero-offload.md)");
    }
    if (options.offload_ratio < 1) {
      if constexpr (!offloaded)
        fail_on_every_rank(ErrorKind::unsupported,
                           "offload_ratio below 1 splits the update of offloaded optimizer states "
                           "between the CPU and the GPU; this placement does not offload them "
                           "from a device (docs/zero-offload.md)");
      if constexpr (parameters_offloaded_to_memory)
        fail_on_every_rank(ErrorKind::unsupported,
                           "offload_ratio below 1 updates part of each block on the GPU, into a "
                           "compute copy in device memory; with the parameters in host memory "
                           "(offload_param) the whole update runs on the host: keep a ratio of 1 "
                           "(docs/zero-infinity-gpu.md)");
    }
    if (options.delayed_parameter_update_after >= 0) {
      if constexpr (!offloaded)
        fail(ErrorKind::unsupported,
             "delayed_parameter_update_after: the delayed parameter update overlaps the CPU's "
             "update with the device's next step; it needs the optimizer states offloaded from a "
             "device (docs/zero-offload.md)");
      if constexpr (offloaded && (TrustRatioUpdate<typename Opt::update_type> ||
                                  std::same_as<typename Where::optimizer_states, nvme>))
        fail(ErrorKind::unsupported,
             "delayed_parameter_update_after: the delayed update runs element-wise optimizers "
             "(Adam, AdamW, SGD) in host memory; with LAMB (whose sums are a collective) or "
             "on the NVMe tier it is not built");
    }
    // ZeRO-Offload: each layer's reduced gradient leaves for the host once it is final, during
    // backward.
    if constexpr (sends_gradients_early)
      gradients_.on_layer_reduced([this](std::size_t l) {
        if (!send_gradients_early_) return;
        gradients_.visit_reduced([&](auto& reduced) {
          using G = typename std::remove_reference_t<decltype(reduced)>::value_type;
          if constexpr (GradientElement<G>)
            optimizer_.gradient_reduced(l, handed_out(std::as_const(reduced).block(l)));
        });
      });
    // The offloaded store sized its staging for the reduced gradient the gradient store keeps.
    if constexpr (offloaded)
      gradients_.visit_reduced([&](auto& reduced) {
        using G = typename std::remove_reference_t<decltype(reduced)>::value_type;
        require(dtype_of<G> == options.reduced_gradient_dtype(),
                std::string("offloaded optimizer: the gradient store reduces into ") +
                    to_string(dtype_of<G>) + ", EngineOptions::reduced_gradient_dtype() says " +
                    to_string(options.reduced_gradient_dtype()),
                ErrorKind::mismatch);
      });
  }

  ModelStates(const ModelStates&) = delete;
  ModelStates& operator=(const ModelStates&) = delete;

  void set_layer(std::size_t l, View<const float> values) {
    const IoStats before = nvme_traffic();
    apply_delayed_update();
    parameters_.set_layer(l, values);
    optimizer_.set_layer(l, values);
    outside_steps_ += nvme_traffic() - before;
  }
  std::vector<float> layer(std::size_t l) {
    apply_delayed_update();
    return optimizer_.layer(optimizer_group(shard_, control_), l);
  }
  LayerParameters acquire(std::size_t l) { return parameters_.acquire(l); }
  View<T, GradientMemory> gradients(std::size_t l) { return gradients_.gradients(l); }

  // ZeRO-Offload's speculative update: at the start of the last micro-step's backward, the update
  // and the gradient multiplier the step will take unless it is skipped or clipped (`optimizer`'s
  // next update: its counter moves only in update()). Nothing for another placement.
  template <Optimizer O>
  void speculate(const O& optimizer, float grad_multiplier) {
    if constexpr (sends_gradients_early && ElementwiseUpdate<typename O::update_type>) {
      O next = optimizer;
      const auto update = next.begin_step();
      gradients_.visit_reduced([&](auto& reduced) {
        using G = typename std::remove_reference_t<decltype(reduced)>::value_type;
        if constexpr (GradientElement<G>)
          optimizer_.template speculate<G, T>(update, grad_multiplier);
      });
    }
  }
  void grads_ready(std::size_t l, MicroSteps::Arrival arrival) { gradients_.ready(l, arrival); }

  // The gradients of the step, reduced; `replica` completes the average of shard_within plans.
  void finish_reduction(Comm* replica) {
    gradients_.finish();
    if (replica) {
      // The average changes what was final when each layer landed: the offloaded store sends the
      // blocks at the step instead, from this step on.
      if constexpr (sends_gradients_early) {
        optimizer_.gradients_changed();
        send_gradients_early_ = false;
      }
      gradients_.average_over_replicas(*replica);
    }
  }
  double local_sum_of_squares() { return gradients_.local_sum_of_squares(); }

  // step() may change the weights: stage 3 refuses while a layer is held.
  void require_nothing_acquired() const { parameters_.require_nothing_acquired(); }

  // Updates what this rank owns and shares the new weights: the optimizer's step counter moves
  // once nothing can refuse the update any more.
  // An optimizer needing whole-parameter norms (LAMB) hands the store the shard group, over which
  // it combines its partial sums.
  template <Optimizer O>
  void update(O& optimizer, float grad_multiplier) {
    parameters_.begin_update();
    const auto update = optimizer.begin_step();
    gradients_.visit_reduced([&](auto& reduced) {
      using G = typename std::remove_reference_t<decltype(reduced)>::value_type;
      if constexpr (GradientElement<G>) {
        const auto grads = [&](std::size_t l) {
          return handed_out(std::as_const(reduced).block(l));
        };
        const auto target = [&](std::size_t l) { return parameters_.update_target(l); };
        const auto updated = [&](std::size_t l) { parameters_.layer_updated(l); };
        if constexpr (TrustRatioUpdate<typename O::update_type>)
          optimizer_.step(optimizer_group(shard_, control_), update, grad_multiplier, grads, target,
                          updated);
        else
          optimizer_.step(update, grad_multiplier, grads, target, updated);
      }
    });
    parameters_.end_update();
  }
  void end_step() {
    if constexpr (sends_gradients_early) optimizer_.end_step();
    gradients_.clear();
    parameters_.end_step();
  }

  // The delayed parameter update still running on the host (docs/zero-offload.md) completes, and
  // its weights are shared as after a step: before anything reads or writes the weights or the
  // optimizer states between steps. Collective; nothing to do without one.
  void apply_delayed_update() {
    if constexpr (requires { optimizer_.update_pending(); }) {
      if (!optimizer_.update_pending()) return;
      parameters_.begin_update();
      optimizer_.finish_delayed_update([&](std::size_t l) { return parameters_.update_target(l); },
                                       [&](std::size_t l) { parameters_.layer_updated(l); });
      parameters_.end_update();
    }
  }

  // --- checkpoints ------------------------------------------------------------------------------
  using optimizer_states_type = OptimizerStates;
  OptimizerStates& optimizer_states() noexcept { return optimizer_; }
  // Loading: fill(tensor, layer, part, into) gives every part of this rank's optimizer states,
  // and the compute copy of what this rank updates follows from the master weights, converted as
  // a step converts them. No communication: share_loaded_parameters() then shares them.
  template <class Fill>
  void load_states(Fill&& fill) {
    const IoStats before = nvme_traffic();
    apply_delayed_update();
    parameters_.begin_update();
    std::optional<std::size_t> open; // the layer whose compute copy is being written
    optimizer_.write_states([&](std::size_t t, std::size_t l, Range part, View<float> into) {
      if (open && *open != l) parameters_.layer_updated(*open);
      open = l;
      fill(t, l, part, into);
      if (t == 0) // through a host copy when the compute copy is in device memory
        detail::write_on_host(
            exec_, parameters_.update_target(l).subview(part.begin, part.size()),
            [&](View<T> copy) { convert_n(into.data(), copy.data(), part.size()); });
    });
    if (open) parameters_.layer_updated(*open);
    outside_steps_ += nvme_traffic() - before;
  }
  // Collective: what every rank loaded reaches the ranks that keep it (as after a step).
  void share_loaded_parameters() {
    const IoStats before = nvme_traffic();
    parameters_.end_update();
    outside_steps_ += nvme_traffic() - before;
  }

  const ReducerStats& reduction() const noexcept { return gradients_.stats(); }
  // What ZeRO-Offload's store did in the step that ended last (zeros for any other placement).
  OffloadStepReport offload_report() const {
    if constexpr (sends_gradients_early)
      return optimizer_.step_report();
    else
      return {};
  }
  double gather_exposed_seconds() const noexcept { return parameters_.gather_exposed_seconds(); }
  GatherCounts gather_counts() const noexcept { return parameters_.gather_counts(); }
  // Everything the NVMe tier moved for this rank so far.
  IoStats nvme_traffic() const { return parameters_.nvme_traffic() + optimizer_.nvme_traffic(); }
  // What it moved in steps: setting weights and loading checkpoints left out.
  IoStats nvme_traffic_in_steps() const { return nvme_traffic() - outside_steps_; }

  MemoryReport memory() const {
    MemoryReport m;
    m.parameters = parameters_.parameter_bytes();
    m.gradients = {gradients_.gradient_bytes(), 0};
    m.master_weights = optimizer_.master_bytes();
    m.optimizer_states = optimizer_.state_bytes();
    m.buffers = gradients_.buffer_bytes() + parameters_.buffer_bytes() + optimizer_.buffer_bytes();
    if constexpr (requires { optimizer_.device_share_bytes(); })
      m.optimizer_on_device = optimizer_.device_share_bytes();
    m.parameters_tier = detail::place_name<typename Where::parameters>();
    m.gradients_tier = detail::place_name<typename Where::gradients>();
    m.optimizer_tier = detail::place_name<typename Where::optimizer_states>();
    return m;
  }

 private:
  static constexpr bool parameters_on_nvme_beside_device =
      std::same_as<typename Where::parameters, nvme> && offloaded;
  // The parameter store; one that keeps its blocks on the NVMe tier beside a device agrees over
  // the host communicator `control` what can fail on one rank (offload/nvme_parameters.hpp).
  static Parameters parameter_store(Comm& shard, Control& control, const ModelLayout& model,
                                    const EngineOptions& options, Comm* hpz, Exec exec) {
    if constexpr (parameters_on_nvme_beside_device)
      return Parameters(shard, control, model, options, hpz, exec);
    else
      return Parameters(shard, model, options, hpz, exec);
  }

  // The shard group's communicator the optimizer store moves its states with.
  static OptimizerGroup& optimizer_group(Comm& shard, Control& control) {
    if constexpr (offloaded)
      return control;
    else
      return shard;
  }

  // Whether the optimizer store takes each layer's reduced gradient as it lands (ZeRO-Offload's).
  static constexpr bool sends_gradients_early =
      requires(OptimizerStates & o, View<const T, GradientMemory> block) {
    o.gradient_reduced(std::size_t{}, block);
  };

  Comm& shard_;
  Control& control_;
  Exec exec_;
  Parameters parameters_;
  Gradients gradients_;
  OptimizerStates optimizer_;
  IoStats outside_steps_;            // NVMe traffic of set_layer and loads
  bool send_gradients_early_ = true; // false once the reduced gradients change after landing
};

} // namespace zero
