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
// compute type, which is chosen at run time (EngineOptions::compute_dtype) once, here.
// All ranks must call the same methods in the same order (they are collectives).

#include "zero/checkpoint/directory.hpp"
#include "zero/checkpoint/reshard.hpp"
#include "zero/checkpoint/run_state.hpp"
#include "zero/checkpoint/saver.hpp"
#include "zero/comm/agreed.hpp"
#include "zero/comm/counting_communicator.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/model_states.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/rank_groups.hpp"
#include "zero/engine/report.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/precision/grad_norm.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/precision/skipped_steps.hpp"
#include "zero/shard/verify.hpp"
#include "zero/stage/placement.hpp"
#include "zero/stage/plan.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace zero {

template <ShardingPlanType Plan, class Comm, class Where, Optimizer Opt, LossScaler Scaler>
class Engine {
  static_assert(ReducingCommunicator<Comm>,
                "zero: the engine reduces gradients: its communicator needs all_reduce and "
                "reduce_scatter (zero::ReducingCommunicator)");
  static_assert(GatheringCommunicator<Comm>,
                "zero: the engine all-gathers parameters (stage 3 before each layer's compute, "
                "stages 1/2 after the step) and broadcasts the initial weights: its communicator "
                "needs all_gather and broadcast (zero::GatheringCommunicator)");
  static_assert(Communicator<Comm>,
                "zero: the engine gives itself its own groups with split(color, key) and needs "
                "barrier() (zero::Communicator)");
  using Placement = placement_of<Where>;
  static_assert(PlacementType<Placement>,
                "zero: the engine's third parameter is a memory space (zero::host) or a "
                "zero::Placement<...>");
  static_assert(check_plan<Plan>() && check_placement<Plan, Placement>());
  static_assert(EqualSlices<typename Plan::partitioner> || VariableCountCommunicator<Comm>,
                "zero: the plan's partitioner gives ranks blocks of different sizes, which the "
                "engine reduces and gathers with per-rank counts; this communicator has no "
                "reduce_scatter / all_gather with counts (zero::VariableCountCommunicator)");
  static_assert(HostAccessibleSpace<typename Comm::memory_space>,
                "zero: the engine reduces host buffers; use a host communicator (MpiCommunicator, "
                "SelfCommunicator)");

  using Groups = RankGroups<Plan, Comm>;
  using Counted = typename Groups::counted_type;
  template <class T>
  using States = ModelStates<T, Plan, Counted, Placement, Opt>;

 public:
  using plan_type = Plan;
  using placement_type = Placement;
  using optimizer_type = Opt;
  using scaler_type = Scaler;

  Engine(Comm& comm, std::vector<ParameterSpec> parameters, Opt optimizer, Scaler scaler,
         EngineOptions options = {})
      : options_(validated(std::move(options))), optimizer_(std::move(optimizer)),
        scaler_(std::move(scaler)), skipped_(options_.max_consecutive_skipped_steps),
        groups_(comm, options_.hpz_partition_size),
        model_(make_layout_checked(groups_.shard(), std::move(parameters)), groups_.shard().rank(),
               groups_.world().rank()),
        micro_(*model_.sharded, options_.gradient_accumulation_steps) {
    agree_on_options(groups_.world(), options_);
    check_requested_place(options_.offload_optimizer,
                          std::same_as<typename Placement::optimizer_states, nvme>,
                          "zero_optimization.offload_optimizer.device",
                          "zero::Placement<zero::optimizer_states_in<zero::nvme>>");
    check_requested_place(options_.offload_param,
                          std::same_as<typename Placement::parameters, nvme>,
                          "zero_optimization.offload_param.device",
                          "zero::Placement<zero::optimizer_states_in<zero::nvme>, "
                          "zero::parameters_in<zero::nvme>> (stage 3)");
    // The stores agree within the shard group on what can fail on one rank; with several groups
    // (shard_within), the groups agree too, or one group's failure would leave the others waiting
    // in the first world collective.
    if (groups_.shard().size() == groups_.world().size())
      make_states();
    else
      agreed(groups_.world(), "building the model states", [&] { make_states(); });
  }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // A background save still running is waited for, but not completed (that needs every rank):
  // call wait_for_checkpoint() before the engine goes.
  ~Engine() {
    if (saver_.in_flight())
      detail::log_error("engine destroyed with a checkpoint save in flight: it was not completed "
                        "(call wait_for_checkpoint() first)");
  }

  // --- model ------------------------------------------------------------------------------------
  const ShardLayout& layout() const noexcept { return *model_.sharded; }
  std::size_t layers() const noexcept { return model_.layers(); }
  const EngineOptions& options() const noexcept { return options_; }
  Opt& optimizer() noexcept { return optimizer_; }
  Scaler& scaler() noexcept { return scaler_; }
  double loss_scale() const { return scaler_.scale(); }
  int shard_ranks() const { return groups_.shard().size(); }

  // Sets layer l's weights (its parameters in order, fp32). Collective: rank 0's values are
  // broadcast, so every rank starts from the same weights whatever it passed.
  void set_layer(std::size_t l, View<const float> values) {
    check_layer(l);
    const std::size_t numel = layout().layer(l).numel;
    // Only rank 0's values count, so only rank 0's size is checked: a rank that throws alone
    // would leave the others waiting in the broadcast.
    std::vector<std::int64_t> size{static_cast<std::int64_t>(values.size())};
    groups_.world().broadcast(size, 0).wait();
    require(static_cast<std::size_t>(size[0]) == numel,
            "set_layer: layer " + std::to_string(l) + " has " + std::to_string(numel) +
                " elements, rank 0 passed " + std::to_string(size[0]));
    std::vector<float> agreed(numel);
    if (groups_.world().rank() == 0) std::copy(values.begin(), values.end(), agreed.begin());
    groups_.world().broadcast(agreed, 0).wait();
    with_states(*this, [&](auto& s) {
      s.set_layer(l, View<const float>(agreed));
      nvme_before_ = s.nvme_traffic(); // setting weights is not part of the next step's traffic
    });
  }

  // Layer l's fp32 master weights, all of them. Collective (gathers the shards).
  std::vector<float> get_layer(std::size_t l) {
    check_layer(l);
    return with_states(*this, [&](auto& s) { return s.layer(l); });
  }

  // --- forward and backward ----------------------------------------------------------------------
  // The full compute copy of layer l while the handle lives (stage 3 gathers it, and starts
  // gathering the next layer).
  LayerParameters acquire(std::size_t l) {
    check_layer(l);
    return with_states(*this, [&](auto& s) { return s.acquire(l); });
  }

  // Where backward writes layer l's gradient (its parameters in order, compute type). Every
  // element must be written; hand it over with grads_ready(l).
  template <Element T>
  View<T> gradients(std::size_t l) {
    check_layer(l);
    require(dtype_of<T> == options_.compute_dtype, std::string("gradients: the compute type is ") +
                                                       to_string(options_.compute_dtype) +
                                                       ", not " + to_string(dtype_of<T>));
    return with_states(*this, [&](auto& s) -> View<T> {
      if constexpr (std::is_same_v<typename std::decay_t<decltype(s)>::value_type, T>)
        return s.gradients(l);
      else
        return {};
    });
  }

  // Layer l's gradient of this micro-step is complete: it is reduced (or accumulated) now.
  void grads_ready(std::size_t l) {
    check_layer(l);
    if (const auto arrival = micro_.arrive(l))
      with_states(*this, [&](auto& s) { s.grads_ready(l, *arrival); });
  }

  // --- the step ---------------------------------------------------------------------------------
  // Finishes the reductions, checks for overflow on every rank, clips by the global norm, updates
  // this rank's shard and shares the new weights. Skipped on every rank after an overflow.
  StepResult step() {
    micro_.require_complete();
    StepResult result;
    Stopwatch clock;
    with_states(*this, [&](auto& s) {
      s.require_nothing_acquired(); // before any collective: a refusal leaves nothing half done
      s.finish_reduction(groups_.replica());
      result.seconds.reduction_wait = clock.lap();
      result.reduction = s.reduction();
      result.loss_scale = scaler_.scale();
      const double unscale = 1.0 / (result.loss_scale * options_.gradient_accumulation_steps);
      // One all-reduce gives both the norm and the overflow check: a sum of squares is finite
      // exactly when every gradient is, and a NaN or infinity on any rank reaches every rank.
      const GradNorm norm = global_grad_norm(groups_.shard(), s.local_sum_of_squares(), unscale);
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
      const double exposed = s.gather_exposed_seconds();
      result.gather_exposed_seconds = exposed - gather_exposed_before_;
      gather_exposed_before_ = exposed;
      const GatherCounts gathers = s.gather_counts();
      result.gathers = gathers - gathers_before_;
      gathers_before_ = gathers;
      const IoStats traffic = s.nvme_traffic();
      result.nvme = traffic - nvme_before_;
      nvme_before_ = traffic;
    });
    micro_.start_step();
    const CommStats total = groups_.total();
    result.communication = total - last_total_;
    last_total_ = total;
    const CommStats hpz = groups_.hpz_total();
    result.within_hpz_groups = hpz - last_hpz_total_;
    last_hpz_total_ = hpz;
    result.seconds.total = clock.total();
    // Last, so that a run stopped here leaves the engine between steps.
    skipped_.record(!result.applied, result.loss_scale, scaler_.state().dynamic);
    return result;
  }

  // Calls f(T{}) with the compute type (float, half or bfloat16): the bridge from the run-time
  // option to typed forward and backward code.
  template <class F>
  decltype(auto) visit_compute_type(F&& f) {
    return with_states(*this, [&](auto& s) -> decltype(auto) {
      return f(typename std::decay_t<decltype(s)>::value_type{});
    });
  }

  // --- checkpoints (docs/checkpoints.md)
  // ----------------------------------------------------------- Saves the fp32 master weights, the
  // optimizer's moments and step, the loss scaler, and what `options` adds, as DIR/TAG, then points
  // DIR/latest at it. Collective, between steps. Each rank holding a shard writes it (replicas do
  // not); rank 0 writes the manifest once all are durable. With options.async, this returns once
  // the states are copied, and the save completes at the next checkpoint call or
  // wait_for_checkpoint(). Directories must be shared by all ranks.
  void save_checkpoint(const std::filesystem::path& dir, const std::string& tag,
                       const CheckpointOptions& options = {}) {
    wait_for_checkpoint();
    require_between_steps("save_checkpoint");
    if constexpr (std::same_as<typename Placement::optimizer_states, nvme>)
      require(!options.async,
              "save_checkpoint: an asynchronous save would copy the optimizer states "
              "from NVMe into host memory; save them synchronously",
              ErrorKind::unsupported);
    with_states(*this, [&](auto& s) {
      auto* store = groups_.world().rank() < saving_ranks() ? &s.optimizer_states() : nullptr;
      saver_.begin(groups_.world(), dir, describe_run(tag, options), options, store,
                   saving_ranks());
    });
    if (!options.async) wait_for_checkpoint();
  }

  // Allocates now the host memory that asynchronous saves copy this rank's states into (otherwise
  // the first one does, while training waits: fresh memory costs far more than the copy). Not
  // collective.
  void reserve_checkpoint_snapshot() {
    if (std::same_as<typename Placement::optimizer_states, nvme>) return; // no background saves
    if (groups_.world().rank() >= saving_ranks()) return;
    with_states(*this, [&](auto& s) { saver_.reserve_snapshot(s.optimizer_states()); });
  }

  // Completes a save in flight (waits for its writers, then rank 0 publishes it). Collective; a
  // writer that failed on any rank throws here on every rank.
  void wait_for_checkpoint() { saver_.finish(groups_.world()); }

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
    auto& world = groups_.world();
    Scaler scaler = scaler_;
    Stopwatch clock;
    LoadedCheckpoint loaded = agreed(world, "loading the checkpoint", [&] {
      LoadedCheckpoint info;
      info.path = checkpoint::resolve(dir, tag);
      const checkpoint::Manifest m = checkpoint::read_manifest(info.path);
      checkpoint::check_parameters(m, layout().parameters(), info.path);
      checkpoint::check_optimizer<Opt>(m, info.path);
      scaler.load_state(m.scaler);
      require(!lr_scheduler || m.lr_scheduler_last_batch_iteration,
              "load_checkpoint: " + info.path.string() + " has no learning-rate schedule state",
              ErrorKind::mismatch);
      checkpoint::describe_loaded(info, m);
      checkpoint::StateReader reader(info.path, m); // every file there, of the listed size
      with_states(*this, [&](auto& s) {
        const auto& store = s.optimizer_states();
        try {
          s.load_states([&](std::size_t t, std::size_t l, Range part, View<float> into) {
            reader.fill(t, store.kept_layout(), store.kept_rank(), l, part, into.data());
          });
        } catch (const Error& e) {
          fail(e.kind(), detail::without_prefix(e.what()) + " (this engine's states are now "
                                                            "partly overwritten: load a good "
                                                            "checkpoint before training on)");
        }
      });
      info.bytes_read = reader.bytes_read();
      optimizer_.set_step_count(m.optimizer_step);
      optimizer_.set_lr(m.lr);
      if (lr_scheduler)
        lr_scheduler->set_last_batch_iteration(*m.lr_scheduler_last_batch_iteration);
      return info;
    });
    scaler_ = std::move(scaler);
    loaded.read_seconds = clock.lap();
    with_states(*this, [&](auto& s) {
      s.share_loaded_parameters();
      nvme_before_ = s.nvme_traffic(); // loading is not part of the next step's traffic
    });
    loaded.rebuild_seconds = clock.lap();
    return loaded;
  }

  // --- reports ----------------------------------------------------------------------------------
  MemoryReport memory() const {
    return with_states(*this, [](const auto& s) { return s.memory(); });
  }

  // The paper's formula for this model, plan and precision (Ψ without padding, N = shard group).
  double paper_model_state_bytes() const {
    const double p = static_cast<double>(size_of(options_.compute_dtype));
    estimate::ModelStateQuery query;
    query.parameters = static_cast<double>(layout().numel());
    query.data_parallel = groups_.shard().size();
    query.stage = Plan::stage;
    query.bytes = {p, p, 4.0 * (1 + Opt::state_tensors)};
    return estimate::model_state_memory(query).total();
  }

  // Everything communicated since construction (set_layer's broadcasts included), all groups.
  CommStats communication_total() const { return groups_.total(); }

 private:
  // Seconds since the last lap, and since the start.
  struct Stopwatch {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now(), last = start;
    double lap() {
      const Clock::time_point now = Clock::now();
      const double seconds = std::chrono::duration<double>(now - last).count();
      last = now;
      return seconds;
    }
    double total() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  };

  static EngineOptions validated(EngineOptions o) {
    o.validate();
    return o;
  }
  static ShardLayout make_layout_checked(Counted& comm, std::vector<ParameterSpec> params) {
    for (std::size_t i = 1; i < params.size(); ++i)
      require(params[i].layer >= params[i - 1].layer,
              "engine: parameters must be registered layer by layer (layer ids ascending)");
    for (auto& p : params)
      p.dtype = DType::float32; // the layout counts elements; the stores pick their types
    return make_layout(comm, typename Plan::partitioner{}, std::span<const ParameterSpec>(params));
  }
  // Collective: throws on every rank, naming the setting, unless all ranks share the settings
  // the collectives depend on.
  static void agree_on_options(Counted& world, const EngineOptions& options) {
    const auto settings = options.shared_settings();
    std::vector<std::int64_t> mine;
    mine.reserve(settings.size());
    for (const auto& [name, value] : settings)
      mine.push_back(static_cast<std::int64_t>(value));
    std::vector<std::int64_t> all(mine.size() * std::size_t(world.size()));
    world.all_gather(std::span<const std::int64_t>(mine), all).wait();
    for (int r = 1; r < world.size(); ++r)
      for (std::size_t k = 0; k < mine.size(); ++k)
        if (all[std::size_t(r) * mine.size() + k] != all[k])
          fail(ErrorKind::mismatch,
               "engine: rank " + std::to_string(r) + " was given a different EngineOptions::" +
                   settings[k].first + " than rank 0; every rank must pass the same options");
  }

  void make_states() {
    switch (options_.compute_dtype) {
    case DType::float16:
      states_.template emplace<States<half>>(groups_.shard(), model_, options_, groups_.hpz());
      break;
    case DType::bfloat16:
      states_.template emplace<States<bfloat16>>(groups_.shard(), model_, options_, groups_.hpz());
      break;
    default:
      states_.template emplace<States<float>>(groups_.shard(), model_, options_, groups_.hpz());
    }
  }

  // A DeepSpeed config names where states go; the placement type decides. They must agree
  // ("cpu" is host memory, where a host engine keeps them anyway).
  static void check_requested_place(config::OffloadDevice asked, bool on_nvme, const char* key,
                                    const char* placement) {
    if (asked == config::OffloadDevice::nvme && !on_nvme)
      fail(ErrorKind::unsupported,
           std::string(key) +
               " = \"nvme\", but this engine keeps them in memory: give it the placement " +
               placement + " (and include <zero/offload/nvme_stores.hpp>)");
    if (asked == config::OffloadDevice::cpu && on_nvme)
      fail(ErrorKind::unsupported,
           std::string(key) + " = \"cpu\", but this engine's placement keeps them on NVMe");
  }
  // Checkpoints are taken between steps: no micro-step half done, no layer held.
  void require_between_steps(const char* what) {
    require(micro_.at_step_start(), std::string(what) +
                                        ": call it between steps (after step(), before the next "
                                        "micro-step's gradients)");
    with_states(*this, [](auto& s) { s.require_nothing_acquired(); });
  }
  // Which ranks write states: one copy of each shard (the first shard group), or rank 0 when the
  // states are not sharded.
  int saving_ranks() const { return Plan::optimizer_states ? groups_.shard().size() : 1; }

  checkpoint::Manifest describe_run(const std::string& tag, const CheckpointOptions& options) {
    checkpoint::check_tag(tag);
    checkpoint::Manifest m;
    m.tag = tag;
    m.world_size = groups_.world().size();
    m.stage = Plan::stage;
    m.shard_ranks = groups_.shard().size();
    m.compute_dtype = to_string(options_.compute_dtype);
    m.parameters = checkpoint::saved_parameters(layout().parameters());
    with_states(*this, [&](auto& s) {
      m.partitioner = std::string(s.optimizer_states().kept_layout().policy());
    });
    checkpoint::describe_optimizer(m, optimizer_);
    m.scaler = scaler_.state();
    if (options.lr_scheduler) {
      m.lr_scheduler_type = schedule_name(options.lr_scheduler->schedule());
      m.lr_scheduler_last_batch_iteration = options.lr_scheduler->last_batch_iteration();
    }
    return m;
  }
  void check_layer(std::size_t l) const {
    require(l < layers(), "engine: no layer " + std::to_string(l) + " (the model has " +
                              std::to_string(layers()) + ")");
  }
  // f(states) with the states of the compute type (built in the constructor).
  template <class Self, class F>
  static decltype(auto) with_states(Self& self, F&& f) {
    switch (self.options_.compute_dtype) {
    case DType::float16:
      return f(std::get<States<half>>(self.states_));
    case DType::bfloat16:
      return f(std::get<States<bfloat16>>(self.states_));
    default:
      return f(std::get<States<float>>(self.states_));
    }
  }

  EngineOptions options_;
  Opt optimizer_;
  Scaler scaler_;
  SkippedSteps skipped_;
  Groups groups_;
  ModelLayout model_;
  MicroSteps micro_;
  std::variant<std::monostate, States<float>, States<half>, States<bfloat16>> states_;
  CommStats last_total_, last_hpz_total_;
  double gather_exposed_before_ = 0;
  GatherCounts gathers_before_;
  IoStats nvme_before_;
  checkpoint::Saver saver_;
};

} // namespace zero
