#pragma once
// zero::Engine: ZeRO data parallelism for a training loop the caller writes.
//
//   zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::Adam,
//                zero::DynamicLossScaler> engine(comm, parameters, adam, scaler, options);
//   for (std::size_t l = 0; l < layers; ++l) { auto w = engine.acquire(l); forward(l, w); }
//   for (std::size_t l = layers; l-- > 0;) {
//     auto w = engine.acquire(l);
//     backward(l, w, engine.gradients<T>(l));   // write every element of the layer's gradient
//     engine.grads_ready(l);                     // its reduction starts now, overlapping backward
//   }
//   zero::StepResult r = engine.step();          // overflow check, clipping, update, all-gather
//
// Parameters are registered as zero::ParameterSpec, layer by layer. The plan decides what is
// sharded (stage/plan.hpp), the placement where each kind of state lives (stage/placement.hpp:
// zero::host for all in host memory, or e.g. optimizer states on NVMe). The engine only
// orchestrates: the model states live in three stores (engine/model_states.hpp) typed by the
// compute type, which is chosen at run time (EngineOptions::compute_dtype) once, here, among the
// types the engine is compiled for (the sixth argument, zero::ComputeTypes<float, half, bfloat16>
// by default; one type compiles the stores once instead of three times).
// All ranks must call the same methods in the same order (they are collectives). Over a device
// (Placement<execute_on<CudaStreamSpace>>) the engine also takes a host communicator of the same
// ranks for its own collectives, and the stream it queues its kernels on (docs/gpu-engine.md).

#include "zero/checkpoint/saver.hpp"
#include "zero/comm/agreed.hpp"
#include "zero/engine/checkpointing.hpp"
#include "zero/engine/detail/construction.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/model_states.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/rank_groups.hpp"
#include "zero/engine/report.hpp"
#include "zero/engine/sample_counts.hpp"
#include "zero/engine/typed_states.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/precision/grad_norm.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/precision/skipped_steps.hpp"
#include "zero/stage/placement.hpp"
#include "zero/stage/plan.hpp"

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler,
          class Compute = AllComputeTypes>
class Engine {
  using Placement = placement_of<Where>;
  static_assert(detail::engine_arguments_fit<Plan, Comm, Placement>());

  using Exec = typename Placement::execution_space;
  using Control = detail::control_communicator_t<Comm>;
  static constexpr bool separate_control = !std::same_as<Comm, Control>;
  using Groups = RankGroups<Plan, Comm, Control>;
  template <class T>
  using States = ModelStates<T, Plan, typename Groups::counted_type, Placement, Opt,
                             typename Groups::control_type>;
  using Typed = TypedStates<States, typename detail::compute_types_on<Exec, Compute>::type>;
  // Where gradients are handed out: host memory, or the device's.
  using GradientMemory = HandedOutMemory<typename Placement::gradients>;

 public:
  using plan_type = Plan;
  using placement_type = Placement;
  using optimizer_type = Opt;
  using scaler_type = Scaler;
  using compute_types = Compute;

  // `exec`: where the stores queue their kernels (for a stream space, the caller's compute stream:
  // gradients are read and weights written in order with the work queued there). Optional for
  // the host spaces; CudaStreamSpace names its stream.
  Engine(Comm& comm, std::vector<ParameterSpec> parameters, Opt optimizer, Scaler scaler,
         EngineOptions options = {}, Exec exec = {}) requires(!separate_control)
      : Engine(
            Build{}, [&](int hpz) { return Groups(comm, hpz); }, std::move(parameters),
            std::move(optimizer), std::move(scaler), std::move(options), exec) {}
  // A communicator of device memory for the model states, and `control`, a host communicator of
  // the same ranks in the same order, for the engine's own collectives.
  Engine(Control& control, Comm& comm, std::vector<ParameterSpec> parameters, Opt optimizer,
         Scaler scaler, EngineOptions options = {}, Exec exec = {}) requires separate_control
      : Engine(
            Build{}, [&](int hpz) { return Groups(control, comm, hpz); }, std::move(parameters),
            std::move(optimizer), std::move(scaler), std::move(options), exec) {}

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- model ------------------------------------------------------------------------------------
  const ShardLayout& layout() const noexcept { return *model_.sharded; }
  std::size_t layers() const noexcept { return model_.layers(); }
  const EngineOptions& options() const noexcept { return options_; }
  Opt& optimizer() noexcept { return optimizer_; }
  Scaler& scaler() noexcept { return scaler_; }
  double loss_scale() const { return scaler_.scale(); }
  int shard_ranks() const { return groups_.shard().size(); }
  // This rank in the engine's communicator (the one its constructor was given).
  int rank() noexcept { return groups_.world().rank(); }

  // Sets layer l's weights (its parameters in order, fp32). Collective: rank 0's values are
  // broadcast, so every rank starts from the same weights whatever it passed.
  void set_layer(std::size_t l, View<const float> values) {
    model_.check_layer(l);
    const std::vector<float> agreed =
        rank0_values(groups_.control_world(), values, layout().layer(l).numel,
                     "set_layer: layer " + std::to_string(l));
    states_.visit([&](auto& s) { s.set_layer(l, View<const float>(agreed)); });
  }

  // Layer l's fp32 master weights, all of them. Collective (gathers the shards).
  std::vector<float> get_layer(std::size_t l) {
    model_.check_layer(l);
    return states_.visit([&](auto& s) { return s.layer(l); });
  }

  // --- forward and backward ----------------------------------------------------------------------
  // The full compute copy of layer l while the handle lives (stage 3 gathers it, and starts
  // gathering the next layer).
  LayerParameters acquire(std::size_t l) {
    model_.check_layer(l);
    return states_.visit([&](auto& s) { return s.acquire(l); });
  }

  // Where backward writes layer l's gradient (its parameters in order, compute type). Every
  // element must be written; hand it over with grads_ready(l).
  template <Element T>
  View<T, GradientMemory> gradients(std::size_t l) {
    model_.check_layer(l);
    return states_.template visit_as<T, View<T, GradientMemory>>(
        "gradients", [&](auto& s) { return s.gradients(l); });
  }

  // Layer l's gradient of this micro-step is complete: it is reduced (or accumulated) now.
  void grads_ready(std::size_t l) {
    model_.check_layer(l);
    if (const auto arrival = micro_.arrive(l))
      states_.visit([&](auto& s) { s.grads_ready(l, *arrival); });
  }

  // With EngineOptions::weigh_by_samples: the gradients this rank hands over in this step are sums
  // over `samples` more samples (call it once per micro-step, or once with the step's total).
  void add_samples(std::size_t samples) { samples_.add(samples); }

  // --- the step ---------------------------------------------------------------------------------
  // Finishes the reductions, checks for overflow on every rank, clips by the global norm, updates
  // this rank's shard and shares the new weights. Skipped on every rank after an overflow.
  StepResult step() {
    micro_.require_complete();
    StepResult result;
    Stopwatch clock;
    states_.visit([&](auto& s) {
      s.require_nothing_acquired(); // before any collective: a refusal leaves nothing half done
      s.finish_reduction(groups_.replica());
      result.seconds.reduction_wait = clock.lap();
      result.reduction = s.reduction();
      result.loss_scale = scaler_.scale();
      const double unscale =
          samples_.gradient_factor(groups_.control_world(), options_.gradient_accumulation_steps) /
          result.loss_scale;
      // One all-reduce gives both the norm and the overflow check: a sum of squares is finite
      // exactly when every gradient is, and a NaN or infinity on any rank reaches every rank.
      const GradNorm norm =
          global_grad_norm(groups_.control_shard(), s.local_sum_of_squares(), unscale);
      result.seconds.norm = clock.lap();
      result.grad_norm = norm.norm;
      result.applied = norm.finite;
      if (norm.finite) {
        result.clip_coefficient = options_.gradient_clipping > 0
                                      ? clip_coefficient(norm, options_.gradient_clipping)
                                      : 1.0;
        s.update(optimizer_, static_cast<float>(result.clip_coefficient * unscale));
        result.seconds.update = clock.lap();
      }
      scaler_.update(!norm.finite);
      s.end_step();
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

  // Calls f(T{}) with the compute type (float, half or bfloat16): the bridge from the run-time
  // option to typed forward and backward code.
  template <class F>
  decltype(auto) visit_compute_type(F&& f) {
    return states_.visit_type(std::forward<F>(f));
  }

  // --- checkpoints (docs/checkpoints.md) -------------------------------------------------------
  // Saves the fp32 master weights, the optimizer's moments and step, the loss scaler, and what
  // `options` adds, as DIR/TAG, then points DIR/latest at it. Collective, between steps. Each rank
  // holding a shard writes it (replicas do not); rank 0 writes the manifest once all are durable.
  // With options.async, this returns once the states are copied, and the save completes at the
  // next checkpoint call or wait_for_checkpoint(). Directories must be shared by all ranks.
  void save_checkpoint(const std::filesystem::path& dir, const std::string& tag,
                       const CheckpointOptions& options = {}) {
    wait_for_checkpoint();
    require_between_steps("save_checkpoint");
    states_.visit([&](auto& s) {
      detail::begin_save<Plan, Placement>(saver_, groups_, dir, tag, options, options_, layout(), s,
                                          optimizer_, scaler_);
    });
    if (!options.async) wait_for_checkpoint();
  }

  // Allocates now the host memory that asynchronous saves copy this rank's states into (otherwise
  // the first one does, while training waits: fresh memory costs far more than the copy). Not
  // collective.
  void reserve_checkpoint_snapshot() {
    states_.visit([&](auto& s) { detail::reserve_snapshot<Plan, Placement>(saver_, groups_, s); });
  }

  // Completes a save in flight (waits for its writers, then rank 0 publishes it). Collective; a
  // writer that failed on any rank throws here on every rank.
  void wait_for_checkpoint() { saver_.finish(groups_.control_world()); }

  // Loads DIR/TAG (or the checkpoint DIR/latest names, or DIR when it is one checkpoint), saved
  // at any world size, stage or partitioner: each rank reads only what it now keeps. Restores the
  // optimizer's step and learning rate and the loss scaler's state, and `lr_scheduler` when given.
  // Collective, between steps; an error on any rank throws on every rank, nothing half-loaded is
  // used.
  LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir,
                                   const std::optional<std::string>& tag = std::nullopt,
                                   LrScheduler* lr_scheduler = nullptr) {
    wait_for_checkpoint();
    require_between_steps("load_checkpoint");
    return states_.visit([&](auto& s) {
      return detail::load_into(groups_.control_world(), dir, tag, lr_scheduler, layout(), s,
                               optimizer_, scaler_);
    });
  }

  // --- reports ----------------------------------------------------------------------------------
  MemoryReport memory() const {
    return states_.visit([](const auto& s) { return s.memory(); });
  }

  // The paper's formula for this model, plan and precision (Ψ without padding, N = shard group).
  double paper_model_state_bytes() const {
    return estimate::paper_model_state_bytes(static_cast<double>(layout().numel()),
                                             groups_.shard().size(), Plan::stage,
                                             size_of(options_.compute_dtype), Opt::state_tensors);
  }

  // Everything communicated since construction (set_layer's broadcasts included), all groups.
  CommStats communication_total() const { return groups_.total(); }

 private:
  struct Build {};
  template <class MakeGroups>
  Engine(Build, MakeGroups&& make_groups, std::vector<ParameterSpec> parameters, Opt optimizer,
         Scaler scaler, EngineOptions options, Exec exec)
      : options_(detail::validated(std::move(options))), optimizer_(std::move(optimizer)),
        scaler_(std::move(scaler)), skipped_(options_.max_consecutive_skipped_steps),
        groups_(make_groups(options_.hpz_partition_size)),
        model_(detail::make_layout_checked<Plan>(groups_.control_shard(), std::move(parameters)),
               groups_.shard().rank(), groups_.world().rank()),
        micro_(*model_.sharded, options_.gradient_accumulation_steps),
        samples_(options_.weigh_by_samples) {
    detail::agree_on_options(groups_.control_world(), options_);
    detail::check_requested_places<Placement>(options_);
    groups_.build_agreed("building the model states", [&] {
      states_.emplace(options_.compute_dtype, groups_.shard(), groups_.control_shard(), model_,
                      options_, groups_.hpz(), exec);
    });
  }

  // Checkpoints are taken between steps: no micro-step half done, no layer held.
  void require_between_steps(const char* what) {
    micro_.require_at_step_start(what);
    states_.visit([](auto& s) { s.require_nothing_acquired(); });
  }
  EngineOptions options_;
  Opt optimizer_;
  Scaler scaler_;
  SkippedSteps skipped_;
  Groups groups_;
  ModelLayout model_;
  MicroSteps micro_;
  SampleCounts samples_;
  Typed states_;          // the three stores, of the compute type
  StepBaseline baseline_; // the totals the next step's report subtracts
  checkpoint::Saver saver_;
};

} // namespace zero
