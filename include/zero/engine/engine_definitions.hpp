#pragma once
// The definitions of zero::Engine's members (engine_class.hpp declares them; engine.hpp includes
// both).
// They stand outside the class so that an explicit instantiation declaration suppresses them: a
// unit that names one of the prebuilt engines (zero/engines.hpp) then compiles none of the
// engine's, the stores' or the checkpoints' code, which the library zero::engines holds once.

#include "zero/checkpoint/saver.hpp"
#include "zero/comm/agreed.hpp"
#include "zero/engine/checkpointing.hpp"
#include "zero/engine/detail/tensor_agreement.hpp"
#include "zero/engine/engine_class.hpp"
#include "zero/engine/model_states.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/precision/grad_norm.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
Engine<Plan, Comm, Where, Opt, Scaler, Compute>::Engine(Control* control, Comm* tensor, Comm& comm,
                                                        std::vector<ParameterSpec> parameters,
                                                        Opt optimizer, Scaler scaler,
                                                        EngineOptions options, Exec exec)
    : options_(detail::validated(std::move(options))), optimizer_(std::move(optimizer)),
      scaler_(std::move(scaler)), skipped_(options_.max_consecutive_skipped_steps),
      groups_(make_groups(control, tensor, comm, options_.hpz_partition_size)),
      model_(make_model(groups_, std::move(parameters), options_)),
      micro_(*model_.sharded, options_.gradient_accumulation_steps),
      samples_(options_.weigh_by_samples), states_(std::make_unique<Typed>()),
      saver_(std::make_unique<checkpoint::Saver>()) {
  const auto build = [&] {
    detail::agree_on_options(groups_.control_world(), options_);
    detail::check_requested_places<Placement>(options_);
    // A block of 2048 could hold replicated parameters beside slices that differ by tensor rank:
    // its scale would differ, and the replicated parameters with it.
    require_on_every_rank(groups_.control_tensor() == nullptr ||
                              options_.moments == MomentStorage::fp32,
                          "engine: 8-bit moments (EngineOptions::moments) are not built under "
                          "tensor parallelism yet",
                          ErrorKind::unsupported);
    groups_.build_agreed("building the model states", [&] {
      states_->emplace(options_.compute_dtype, groups_.shard(), groups_.control_shard(), model_,
                       options_, groups_.hpz(), exec);
    });
  };
  auto* const tensor_group = groups_.control_tensor();
  if (tensor_group == nullptr) {
    build();
    return;
  }
  // Each step is agreed over the whole grid before the next one's collectives: what one group
  // refused reaches the other groups' ranks, which would otherwise wait for its ranks.
  detail::grid_agreed(tensor_group, groups_.control_world(), "agreeing over tensor parallelism",
                      [&] {
                        detail::agree_on_tensor_parameters(*tensor_group, layout());
                        detail::agree_on_options(*tensor_group, options_);
                      });
  detail::grid_agreed(tensor_group, groups_.control_world(), "building the engine", build);
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
auto Engine<Plan, Comm, Where, Opt, Scaler, Compute>::make_groups(Control* control, Comm* tensor,
                                                                  Comm& comm,
                                                                  int hpz_partition_size)
    -> Groups {
  if constexpr (separate_control)
    return Groups(*control, comm, hpz_partition_size);
  else if (tensor != nullptr)
    return Groups(comm, *tensor, hpz_partition_size);
  else
    return Groups(comm, hpz_partition_size);
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
ModelLayout Engine<Plan, Comm, Where, Opt, Scaler, Compute>::make_model(
    Groups& groups, std::vector<ParameterSpec> parameters, const EngineOptions& options) {
  auto* const tensor = groups.control_tensor();
  // Tensor rank 0 counts the replicated parameters in the gradient norm, the others leave them
  // out: each counts once.
  return ModelLayout(
      detail::grid_agreed(tensor, groups.control_world(), "building the shard layout",
                          [&] {
                            return detail::make_layout_checked<Plan>(
                                groups.control_shard(), std::move(parameters), options);
                          }),
      groups.shard().rank(), groups.world().rank(), tensor == nullptr || tensor->rank() == 0);
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
Engine<Plan, Comm, Where, Opt, Scaler, Compute>::~Engine() = default;

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::set_layer(std::size_t l,
                                                                View<const float> values) {
  model_.check_layer(l);
  const std::vector<float> agreed =
      rank0_values(groups_.control_world(), values, layout().layer(l).numel,
                   "set_layer: layer " + std::to_string(l));
  states_->visit([&](auto& s) { s.set_layer(l, View<const float>(agreed)); });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
std::vector<float> Engine<Plan, Comm, Where, Opt, Scaler, Compute>::get_layer(std::size_t l) {
  model_.check_layer(l);
  return states_->visit([&](auto& s) { return s.layer(l); });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
LayerParameters Engine<Plan, Comm, Where, Opt, Scaler, Compute>::acquire(std::size_t l) {
  model_.check_layer(l);
  return states_->visit([&](auto& s) { return s.acquire(l); });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
auto Engine<Plan, Comm, Where, Opt, Scaler, Compute>::gradient_buffer(std::size_t l,
                                                                      DType requested)
    -> GradientBuffer {
  model_.check_layer(l);
  return states_->visit([&](auto& s) {
    using T = typename std::decay_t<decltype(s)>::value_type;
    require(requested == dtype_of<T>, std::string("gradients: the compute type is ") +
                                          to_string(dtype_of<T>) + ", not " + to_string(requested));
    const auto view = s.gradients(l);
    return GradientBuffer{static_cast<void*>(view.data()), view.size()};
  });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::grads_ready(std::size_t l) {
  model_.check_layer(l);
  if (const auto arrival = micro_.arrive(l))
    states_->visit([&](auto& s) {
      // The speculative update (ZeRO-Offload) starts with the last micro-step's backward, with the
      // multiplier step() takes when it does not clip: the same expression, so the same bits.
      // (weigh_by_samples is refused with it: gradient_factor() is no collective here.)
      if (options_.speculative_update && arrival->opens_micro_step && arrival->in_last_micro_step)
        s.speculate(optimizer_, gradient_multiplier(1.0, unscale_factor()));
      s.grads_ready(l, *arrival);
    });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
StepResult Engine<Plan, Comm, Where, Opt, Scaler, Compute>::step() {
  micro_.require_complete();
  StepResult result;
  Stopwatch clock;
  states_->visit([&](auto& s) {
    s.require_nothing_acquired(); // before any collective: a refusal leaves nothing half done
    s.finish_reduction(groups_.replica());
    result.seconds.reduction_wait = clock.lap();
    result.reduction = s.reduction();
    result.loss_scale = scaler_.scale();
    const double unscale = unscale_factor();
    // One all-reduce gives both the norm and the overflow check: a sum of squares is finite
    // exactly when every gradient is, and a NaN or infinity on any rank reaches every rank.
    // Under tensor parallelism the sum goes over the tensor-parallel group too: every rank of the
    // grid clips, skips and scales alike.
    auto* const tensor = groups_.control_tensor();
    const GradNorm norm =
        tensor
            ? global_grad_norm(groups_.control_shard(), *tensor, s.local_sum_of_squares(), unscale)
            : global_grad_norm(groups_.control_shard(), s.local_sum_of_squares(), unscale);
    result.seconds.norm = clock.lap();
    result.grad_norm = norm.norm;
    result.applied = norm.finite;
    if (norm.finite) {
      result.clip_coefficient =
          options_.gradient_clipping > 0 ? clip_coefficient(norm, options_.gradient_clipping) : 1.0;
      s.update(optimizer_, gradient_multiplier(result.clip_coefficient, unscale));
      result.seconds.update = clock.lap();
    }
    scaler_.update(!norm.finite);
    s.end_step();
    result.offload = s.offload_report();
    const StepBaseline now{groups_.total(), groups_.hpz_total(), s.gather_exposed_seconds(),
                           s.gather_counts(), s.nvme_traffic_in_steps()};
    baseline_.advance(result, now);
  });
  micro_.start_step();
  result.seconds.total = clock.total();
  // Last, so that a run stopped here leaves the engine between steps.
  skipped_.record(!result.applied, result.loss_scale, scaler_.state().dynamic);
  return result;
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::save_checkpoint(
    const std::filesystem::path& dir, const std::string& tag, const CheckpointOptions& options) {
  wait_for_checkpoint();
  require_between_steps("save_checkpoint");
  states_->visit([&](auto& s) {
    detail::begin_save<Plan, Placement>(*saver_, groups_, dir, tag, options, options_, layout(), s,
                                        optimizer_, scaler_);
  });
  if (!options.async) wait_for_checkpoint();
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::reserve_checkpoint_snapshot() {
  states_->visit([&](auto& s) { detail::reserve_snapshot<Plan, Placement>(*saver_, groups_, s); });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::wait_for_checkpoint() {
  saver_->finish(groups_.control_world(), groups_.control_tensor());
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
LoadedCheckpoint Engine<Plan, Comm, Where, Opt, Scaler, Compute>::load_checkpoint(
    const std::filesystem::path& dir, const std::optional<std::string>& tag,
    LrScheduler* lr_scheduler) {
  wait_for_checkpoint();
  require_between_steps("load_checkpoint");
  return states_->visit([&](auto& s) {
    return detail::load_into(groups_.control_world(), groups_.control_tensor(), dir, tag,
                             lr_scheduler, layout(), s, optimizer_, scaler_);
  });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
MemoryReport Engine<Plan, Comm, Where, Opt, Scaler, Compute>::memory() const {
  return states_->visit([](const auto& s) { return s.memory(); });
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
double Engine<Plan, Comm, Where, Opt, Scaler, Compute>::paper_model_state_bytes() const {
  static_assert(estimate::eight_bit_adam_moment_bytes ==
                2.0 * (1.0 + 4.0 / static_cast<double>(quantized_moment_block)));
  const double moment_bytes = options_.moments == MomentStorage::blockwise_8bit
                                  ? estimate::eight_bit_adam_moment_bytes
                                  : 4.0 * static_cast<double>(Opt::state_tensors);
  return estimate::paper_model_state_bytes(
      static_cast<double>(layout().numel()), groups_.shard().size(), Plan::stage,
      size_of(options_.compute_dtype), moment_bytes, master_bytes_per_parameter(options_.master));
}

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute>
void Engine<Plan, Comm, Where, Opt, Scaler, Compute>::require_between_steps(const char* what) {
  micro_.require_at_step_start(what);
  states_->visit([](auto& s) { s.require_nothing_acquired(); });
}

} // namespace zero
