#pragma once
// zero::Engine's class: ZeRO data parallelism for a training loop the caller writes. Its members
// are defined in engine_definitions.hpp; <zero/engine/engine.hpp> includes both, and a unit that
// names only the prebuilt engines of zero::engines includes this class alone (zero/engines.hpp).
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
// Composed with tensor parallelism, it takes a zero::TensorParallelGroups instead of the
// communicator, and each tensor rank its own slices (docs/tensor-parallel.md):
//
//   zero::TensorParallelGroups groups(world, 2);   // tensor-parallel groups of 2 ranks
//   zero::Engine<...> engine(groups, my_slices, adam, scaler, options);
//
// The model states are sharded over groups.data() (the ranks holding the same slices) as over a
// communicator; the gradient norm counts the parameters marked
// ParameterSpec::replicated_over_tensor_parallel once, and the norm, the overflow check, the
// clipping and the loss scale are agreed over every rank of the grid.

#include "zero/checkpoint/checkpoint_options.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/instruction_set.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/detail/construction.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/rank_groups.hpp"
#include "zero/engine/report.hpp"
#include "zero/engine/sample_counts.hpp"
#include "zero/engine/typed_states.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/precision/skipped_steps.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/stage/placement.hpp"
#include "zero/stage/plan.hpp"
#include "zero/tensor_parallel/groups.hpp"

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

// What the class names without needing their code: the stores (engine/model_states.hpp) and the
// checkpoint saver (checkpoint/saver.hpp), both behind pointers, included by the definitions.
template <Element T, ShardingPlanType Plan, Communicator Comm, PlacementType Where, Optimizer Opt,
          Communicator Control>
class ModelStates;
namespace checkpoint {
class Saver;
}

// The engine's name carries the instruction sets its unit is compiled for (an inline namespace,
// zero::avx512 for instance; zero/core/instruction_set.hpp says why).
inline namespace ZERO_INSTRUCTION_SET {

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
  using Typed = TypedStates<States, Compute>;
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
      : Engine(nullptr, nullptr, comm, std::move(parameters), std::move(optimizer),
               std::move(scaler), std::move(options), exec) {}
  // Tensor parallelism: `parameters` are this rank's (its slices of the split tensors, the
  // replicated ones whole), registered in the same order, layers and names on every tensor rank
  // (refused on every rank otherwise). The model states are sharded over groups.data() as the
  // constructor above shards them over `comm`; the engine keeps its own copy of groups.tensor(),
  // over which the step agrees the norm and the overflow check. Collective over the whole grid.
  Engine(TensorParallelGroups<Comm>& groups, std::vector<ParameterSpec> parameters, Opt optimizer,
         Scaler scaler, EngineOptions options = {}, Exec exec = {}) requires(!separate_control)
      : Engine(nullptr, &groups.tensor(), groups.data(), std::move(parameters),
               std::move(optimizer), std::move(scaler), std::move(options), exec) {}
  // A communicator of device memory for the model states, and `control`, a host communicator of
  // the same ranks in the same order, for the engine's own collectives.
  Engine(Control& control, Comm& comm, std::vector<ParameterSpec> parameters, Opt optimizer,
         Scaler scaler, EngineOptions options = {}, Exec exec = {}) requires separate_control
      : Engine(&control, nullptr, comm, std::move(parameters), std::move(optimizer),
               std::move(scaler), std::move(options), exec) {}

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  // --- model ------------------------------------------------------------------------------------
  const ShardLayout& layout() const noexcept { return *model_.sharded; }
  std::size_t layers() const noexcept { return model_.layers(); }
  const EngineOptions& options() const noexcept { return options_; }
  Opt& optimizer() noexcept { return optimizer_; }
  Scaler& scaler() noexcept { return scaler_; }
  double loss_scale() const { return scaler_.scale(); }
  int shard_ranks() const { return groups_.shard().size(); }
  // This rank in the engine's communicator (the one its constructor was given; under tensor
  // parallelism, groups.data()).
  int rank() noexcept { return groups_.world().rank(); }
  // The tensor-parallel group's size and this rank's place in it (1 and 0 without one).
  int tensor_parallel_size() const noexcept {
    return groups_.tensor() ? groups_.tensor()->size() : 1;
  }
  int tensor_parallel_rank() const noexcept {
    return groups_.tensor() ? groups_.tensor()->rank() : 0;
  }

  // Sets layer l's weights (its parameters in order, fp32). Collective: rank 0's values are
  // broadcast, so every rank starts from the same weights whatever it passed.
  void set_layer(std::size_t l, View<const float> values);

  // Layer l's fp32 master weights, all of them. Collective (gathers the shards).
  std::vector<float> get_layer(std::size_t l);

  // --- forward and backward ----------------------------------------------------------------------
  // The full compute copy of layer l while the handle lives (stage 3 gathers it, and starts
  // gathering the next layer).
  LayerParameters acquire(std::size_t l);

  // Where backward writes layer l's gradient (its parameters in order, compute type). Every
  // element must be written; hand it over with grads_ready(l).
  template <Element T>
  View<T, GradientMemory> gradients(std::size_t l) {
    const GradientBuffer buffer = gradient_buffer(l, dtype_of<T>);
    return View<T, GradientMemory>(static_cast<T*>(buffer.data), buffer.size);
  }

  // Layer l's gradient of this micro-step is complete: it is reduced (or accumulated) now.
  void grads_ready(std::size_t l);

  // With EngineOptions::weigh_by_samples: the gradients this rank hands over in this step are sums
  // over `samples` more samples (call it once per micro-step, or once with the step's total).
  void add_samples(std::size_t samples) { samples_.add(samples); }

  // --- the step ---------------------------------------------------------------------------------
  // Finishes the reductions, checks for overflow on every rank, clips by the global norm, updates
  // this rank's shard and shares the new weights. Skipped on every rank after an overflow.
  StepResult step();

  // Calls f(T{}) with the compute type (float, half or bfloat16): the bridge from the run-time
  // option to typed forward and backward code.
  template <class F>
  decltype(auto) visit_compute_type(F&& f) {
    return Compute::visit(options_.compute_dtype, std::forward<F>(f));
  }

  // --- checkpoints (docs/checkpoints.md) -------------------------------------------------------
  // Saves the fp32 master weights, the optimizer's moments and step, the loss scaler, and what
  // `options` adds, as DIR/TAG, then points DIR/latest at it. Collective, between steps. Each rank
  // holding a shard writes it (replicas do not); rank 0 writes the manifest once all are durable.
  // With options.async, this returns once the states are copied, and the save completes at the
  // next checkpoint call or wait_for_checkpoint(). Directories must be shared by all ranks.
  // Under tensor parallelism each tensor rank's data-parallel group saves its slices as a
  // checkpoint of its own in DIR/TAG/tensor_rank_01_of_02 (...), published together.
  void save_checkpoint(const std::filesystem::path& dir, const std::string& tag,
                       const CheckpointOptions& options = {});

  // Allocates now the host memory that asynchronous saves copy this rank's states into (otherwise
  // the first one does, while training waits: fresh memory costs far more than the copy). Not
  // collective.
  void reserve_checkpoint_snapshot();

  // Completes a save in flight (waits for its writers, then rank 0 publishes it). Collective; a
  // writer that failed on any rank throws here on every rank.
  void wait_for_checkpoint();

  // Loads DIR/TAG (or the checkpoint DIR/latest names, or DIR when it is one checkpoint), saved
  // at any world size, stage or partitioner: each rank reads only what it now keeps. Restores the
  // optimizer's step and learning rate and the loss scaler's state, and `lr_scheduler` when given.
  // Collective, between steps; an error on any rank throws on every rank, nothing half-loaded is
  // used. Under tensor parallelism, only at the tensor-parallel size it was saved at (each tensor
  // rank loads its own slices, at any data-parallel size and stage); a checkpoint of another
  // tensor-parallel size, with or without tensor parallelism, is refused naming both sizes.
  LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir,
                                   const std::optional<std::string>& tag = std::nullopt,
                                   LrScheduler* lr_scheduler = nullptr);

  // --- reports ----------------------------------------------------------------------------------
  MemoryReport memory() const;

  // The paper's formula for this model, plan and precision (Ψ without padding, N = shard group).
  double paper_model_state_bytes() const;

  // Everything communicated since construction (set_layer's broadcasts included), all groups.
  CommStats communication_total() const { return groups_.total(); }

 private:
  // What the public constructors do; `control` is null unless the engine has one of its own,
  // `tensor` null without tensor parallelism.
  Engine(Control* control, Comm* tensor, Comm& comm, std::vector<ParameterSpec> parameters,
         Opt optimizer, Scaler scaler, EngineOptions options, Exec exec);
  static Groups make_groups(Control* control, Comm* tensor, Comm& comm, int hpz_partition_size);
  // The layout over the shard group, agreed over the whole grid under tensor parallelism.
  static ModelLayout make_model(Groups& groups, std::vector<ParameterSpec> parameters,
                                const EngineOptions& options);

  // Layer l's gradient buffer, of the compute type `requested` (an error naming both types
  // otherwise): what gradients<T> views, behind a member that is not a template, so that it is
  // compiled where the engine is.
  struct GradientBuffer {
    void* data;
    std::size_t size;
  };
  GradientBuffer gradient_buffer(std::size_t l, DType requested);

  // Checkpoints are taken between steps: no micro-step half done, no layer held.
  void require_between_steps(const char* what);

  // The factor that turns the step's gradients into averages (the samples' weights, or 1 over
  // the micro-steps) over the loss scale: a collective with EngineOptions::weigh_by_samples.
  double unscale_factor() {
    return samples_.gradient_factor(groups_.control_world(), options_.gradient_accumulation_steps) /
           scaler_.scale();
  }
  // The optimizer's gradient multiplier: one expression for the step and for the speculative
  // update (ZeRO-Offload), which keeps its result only when the two are the same bits.
  static float gradient_multiplier(double clip_coefficient, double unscale) {
    return static_cast<float>(clip_coefficient * unscale);
  }

  EngineOptions options_;
  Opt optimizer_;
  Scaler scaler_;
  SkippedSteps skipped_;
  Groups groups_;
  ModelLayout model_;
  MicroSteps micro_;
  SampleCounts samples_;
  // The three stores, of the compute type. Behind a pointer, so that a unit that names a prebuilt
  // engine (zero/engines.hpp) needs neither their classes nor their headers.
  std::unique_ptr<Typed> states_;
  StepBaseline baseline_;                    // the totals the next step's report subtracts
  std::unique_ptr<checkpoint::Saver> saver_; // behind a pointer for the same reason
};

} // namespace ZERO_INSTRUCTION_SET
} // namespace zero
