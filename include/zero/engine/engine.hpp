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
// Parameters are registered as zero::ParameterSpec with `group` = layer. The plan decides what is
// sharded (see stage/plan.hpp); the engine keeps exactly one owner for every sharded element:
//   stage 0/1/2: the compute copy of all weights; stage 3: this rank's shard, gathered per layer;
//   stage 0/1: the full gradient; stage 2/3: only this rank's reduced shard;
//   stage 0: fp32 master weights and optimizer states of everything; stages 1-3: of the shard.
// All ranks must call the same methods in the same order (they are collectives).

#include "zero/comm/counting_communicator.hpp"
#include "zero/core/any_buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/engine/detail/gather_cache.hpp"
#include "zero/engine/detail/layer_scratch.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/precision/grad_norm.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/reduce/bucketed_reducer.hpp"
#include "zero/shard/verify.hpp"
#include "zero/stage/plan.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace zero {

template <ShardingPlanType Plan, ReducingCommunicator Comm, MemorySpace Space, Optimizer Opt,
          LossScaler Scaler>
class Engine {
  static_assert(check_plan<Plan>());
  static_assert(
      GatheringCommunicator<Comm>,
      "zero: the engine all-gathers parameters (stage 3 before each layer's compute, stages "
      "1/2 after the step) and broadcasts the initial weights: its communicator needs "
      "all_gather and broadcast");
  static_assert(
      Communicator<Comm>,
      "zero: the engine gives itself its own groups with split(color, key) and needs barrier()");
  static_assert(
      HostAccessibleSpace<Space>,
      "zero: the engine keeps model states in host memory (zero::host or zero::pinned_host); "
      "a device-memory engine is not built yet");
  static_assert(HostAccessibleSpace<typename Comm::memory_space>,
                "zero: the engine reduces host buffers; use a host communicator (MpiCommunicator, "
                "SelfCommunicator)");

  using Counted = CountingCommunicator<Comm>;
  using Strategy =
      std::conditional_t<Plan::optimizer_states, ReduceScatterGradients, AllReduceGradients>;
  static constexpr std::size_t states = Opt::state_tensors;

 public:
  using plan_type = Plan;
  using optimizer_type = Opt;
  using scaler_type = Scaler;

  Engine(Comm& comm, std::vector<ParameterSpec> parameters, Opt optimizer, Scaler scaler,
         EngineOptions options = {})
      : options_(checked(options)), optimizer_(std::move(optimizer)), scaler_(std::move(scaler)),
        world_(comm.split(0, comm.rank())), shard_(make_shard_group(comm)),
        replica_(make_replica_group(comm)),
        layout_(make_layout_checked(shard(),
                                    with_dtype(std::move(parameters), options_.compute_dtype))),
        rank_(shard().rank()),
        scratch_(options_.compute_dtype, layout_.layer_count(), largest_layer(layout_)) {
    const std::size_t layers = layout_.layer_count();
    for (std::size_t g = 0; g < layers; ++g)
      total_flat_ += layout_.layer(g).flat_numel;
    shard_numel_ = layout_.shard_numel(rank_);
    const DType compute = options_.compute_dtype;

    if constexpr (Plan::parameters) {
      params_ = AnyBuffer(compute, shard_numel_);
      gather_.emplace(shard(), layout_, compute,
                      typename detail::GatherCache<Counted>::Limits{options_.persistence_threshold,
                                                                    options_.prefetch_elements,
                                                                    options_.max_live_elements});
    } else {
      params_ = AnyBuffer(compute, total_flat_);
    }
    const std::size_t owned = Plan::optimizer_states ? shard_numel_ : total_flat_;
    master_ = Buffer<float>(owned);
    for (auto& s : state_)
      s = Buffer<float>(owned);
    if constexpr (!Plan::gradients) grads_ = AnyBuffer(compute, total_flat_);
    plan_gradient_flow();
    reducer_ = std::make_unique<BucketedReducer<Counted, Strategy>>(
        shard(), layout_,
        typename BucketedReducer<Counted, Strategy>::Options{options_.reduce_bucket_elements,
                                                             bucket_dtype_, ReduceOp::avg});
    for (std::size_t g = 0; g < layers; ++g)
      if (layout_.layer(g).numel > 0) ++layers_with_gradients_;
    arrived_.assign(layers, false);
  }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- model ------------------------------------------------------------------------------------
  const ShardLayout& layout() const noexcept { return layout_; }
  std::size_t layers() const noexcept { return layout_.layer_count(); }
  const EngineOptions& options() const noexcept { return options_; }
  Opt& optimizer() noexcept { return optimizer_; }
  Scaler& scaler() noexcept { return scaler_; }
  double loss_scale() const { return scaler_.scale(); }
  int shard_ranks() const { return shard().size(); }

  // Sets layer g's weights (its parameters end to end, fp32). Collective: rank 0's values are
  // broadcast, so every rank starts from the same weights whatever it passed.
  void set_layer(std::size_t g, View<const float> values) {
    check_layer(g);
    const LayerInfo& info = layout_.layer(g);
    require(values.size() == info.numel, "set_layer: layer " + std::to_string(g) + " has " +
                                             std::to_string(info.numel) + " elements, got " +
                                             std::to_string(values.size()));
    std::vector<float> flat(info.flat_numel, 0.0f);
    std::copy(values.begin(), values.end(), flat.begin());
    world_.broadcast(flat, 0).wait();
    const std::size_t block = info.block_numel;
    if constexpr (Plan::optimizer_states) {
      std::copy_n(flat.data() + std::size_t(rank_) * block, block,
                  master_.data() + layout_.block(g, rank_).begin);
    } else {
      std::copy(flat.begin(), flat.end(), master_.data() + info.flat_base);
    }
    visit_compute([&](auto tag) {
      using T = decltype(tag);
      if constexpr (Plan::parameters) {
        convert_n(flat.data() + std::size_t(rank_) * block,
                  params_.as<T>().data() + layout_.block(g, rank_).begin, block);
      } else {
        convert_n(flat.data(), params_.as<T>().data() + info.flat_base, info.flat_numel);
      }
    });
    if constexpr (Plan::parameters)
      if (gather_->persistent(g)) gather_->end_update(params_);
  }

  // Layer g's fp32 master weights, all of them. Collective (gathers the shards).
  std::vector<float> get_layer(std::size_t g) {
    check_layer(g);
    const LayerInfo& info = layout_.layer(g);
    std::vector<float> flat(info.flat_numel);
    if constexpr (Plan::optimizer_states) {
      View<const float> mine(master_.data() + layout_.block(g, rank_).begin, info.block_numel);
      shard().all_gather(mine, flat).wait();
    } else {
      std::copy_n(master_.data() + info.flat_base, info.flat_numel, flat.data());
    }
    flat.resize(info.numel);
    return flat;
  }

  // --- forward and backward ----------------------------------------------------------------------
  // The full compute copy of layer g while the handle lives (stage 3 gathers it, and starts
  // gathering the next layer).
  LayerParameters acquire(std::size_t g) {
    check_layer(g);
    if constexpr (Plan::parameters) {
      const AnyBuffer& full = gather_->acquire(params_, g);
      return LayerParameters(layout_, g, full, 0,
                             [this](std::size_t layer) { gather_->release(layer); });
    } else {
      return LayerParameters(layout_, g, params_, layout_.layer(g).flat_base, nullptr);
    }
  }

  // Where backward writes layer g's gradient (its parameters end to end, compute type). Every
  // element must be written; hand it over with grads_ready(g).
  template <Element T>
  View<T> gradients(std::size_t g) {
    check_layer(g);
    require(dtype_of<T> == options_.compute_dtype, std::string("gradients: the compute type is ") +
                                                       to_string(options_.compute_dtype) +
                                                       ", not " + to_string(dtype_of<T>));
    const std::size_t numel = layout_.layer(g).numel;
    if constexpr (!Plan::gradients) {
      return grads_.as<T>().subview(layout_.layer(g).flat_base, numel);
    } else {
      return scratch_[g].template as<T>().first(numel);
    }
  }

  // Layer g's gradient of this micro-step is complete: it is reduced (or accumulated) now.
  void grads_ready(std::size_t g) {
    check_layer(g);
    require(!arrived_[g],
            "grads_ready: layer " + std::to_string(g) + " was handed over twice in one micro-step");
    require(micro_ < options_.gradient_accumulation_steps,
            "grads_ready: all " + std::to_string(options_.gradient_accumulation_steps) +
                " micro-steps of this step are done; call step()");
    if (arrived_count_ == 0) begin_micro_step();
    const bool boundary = micro_ + 1 == options_.gradient_accumulation_steps;
    visit_compute([&](auto tag) {
      using T = decltype(tag);
      View<const T> grads = gradients<T>(g);
      if (accumulate_locally_) {
        float* acc = local_accumulator_.data() + layout_.layer(g).flat_base;
        add_into(acc, grads);
        if (boundary) reducer_->add(g, View<const float>(acc, grads.size()));
      } else {
        reducer_->add(g, grads);
      }
    });
    if constexpr (Plan::gradients) scratch_.release(g);
    arrived_[g] = true;
    if (layout_.layer(g).numel > 0) ++arrived_count_;
    if (arrived_count_ == layers_with_gradients_) {
      ++micro_;
      arrived_count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
    }
  }

  // --- the step ---------------------------------------------------------------------------------
  // Finishes the reductions, checks for overflow on every rank, clips by the global norm, updates
  // this rank's shard and shares the new weights. Skipped on every rank after an overflow.
  StepResult step() {
    require(
        micro_ == options_.gradient_accumulation_steps,
        "step() after " + std::to_string(micro_) + " of " +
            std::to_string(options_.gradient_accumulation_steps) +
            " micro-steps (gradient_accumulation_steps); hand over every layer's gradient first");
    StepResult result;
    finish_reduction();
    result.reduction = reducer_->stats();
    if (replica_) average_over_replicas();

    result.loss_scale = scaler_.scale();
    const double unscale = 1.0 / (result.loss_scale * options_.gradient_accumulation_steps);
    // One pass and one all-reduce give both the norm and the overflow check: a sum of squares is
    // finite exactly when every gradient is, and a NaN or infinity on any rank reaches every rank
    // through the sum.
    double sum_of_squares_local = 0.0;
    for_each_owned_block([&](auto grads) { sum_of_squares_local += sum_of_squares(grads); });
    const GradNorm norm = global_norm(sum_of_squares_local, unscale);
    result.grad_norm = norm.norm;
    const bool overflow = !norm.finite;
    if (overflow) {
      scaler_.update(true);
      result.applied = false;
    } else {
      result.clip_coefficient =
          options_.gradient_clipping > 0 ? clip_coefficient(norm, options_.gradient_clipping) : 1.0;
      update(static_cast<float>(result.clip_coefficient * unscale));
      scaler_.update(false);
      result.applied = true;
    }
    clear_accumulators();
    micro_ = 0;
    if constexpr (Plan::parameters)
      result.gather_exposed_seconds = gather_->exposed_seconds() - gather_exposed_before_;
    if constexpr (Plan::parameters) gather_exposed_before_ = gather_->exposed_seconds();
    result.communication = communication_since_last_step();
    return result;
  }

  // Calls f(T{}) with the compute type (float, half or bfloat16): the bridge from the run-time
  // option to typed forward and backward code.
  template <class F>
  decltype(auto) visit_compute_type(F&& f) {
    return visit_compute(std::forward<F>(f));
  }

  // --- reports ----------------------------------------------------------------------------------
  MemoryReport memory() const {
    MemoryReport m;
    m.parameters = params_.size_bytes();
    m.gradients = grads_.size_bytes() + reduced_.size_bytes() + local_accumulator_.size_bytes();
    m.master_weights = master_.size_bytes();
    for (const auto& s : state_)
      m.optimizer_states += s.size_bytes();
    m.buffers = reducer_->buffer_bytes();
    m.buffers += scratch_.bytes();
    if constexpr (Plan::parameters) {
      m.parameters += gather_->persistent_bytes();
      m.buffers += gather_->pool_bytes();
    }
    return m;
  }

  // The paper's formula for this model, plan and precision (Ψ without padding, N = shard group).
  double paper_model_state_bytes() const {
    const double p = static_cast<double>(size_of(options_.compute_dtype));
    const double k = 4.0 * (1 + states);
    return zero::paper_model_state_bytes(Plan::stage, static_cast<double>(layout_.numel()),
                                         static_cast<double>(shard().size()), p, k);
  }

  // Everything communicated since construction (set_layer's broadcasts included), all groups.
  CommStats communication_total() const {
    CommStats total = world_.stats();
    if (shard_) add_stats(total, shard_->stats());
    if (replica_) add_stats(total, replica_->stats());
    return total;
  }

 private:
  // --- construction -----------------------------------------------------------------------------
  static EngineOptions checked(EngineOptions o) {
    o.validate();
    return o;
  }
  static std::size_t largest_layer(const ShardLayout& layout) {
    std::size_t largest = 0;
    for (std::size_t g = 0; g < layout.layer_count(); ++g)
      largest = std::max(largest, layout.layer(g).numel);
    return largest;
  }
  static std::vector<ParameterSpec> with_dtype(std::vector<ParameterSpec> params, DType dtype) {
    for (auto& p : params)
      p.dtype = dtype;
    return params;
  }
  std::optional<Counted> make_shard_group(Comm& comm) {
    if constexpr (Plan::group_ranks == 0) {
      return std::nullopt; // the world is the shard group
    } else {
      require(comm.size() % Plan::group_ranks == 0,
              "engine: shard_within<" + std::to_string(Plan::group_ranks) +
                  "> needs a multiple of " + std::to_string(Plan::group_ranks) + " ranks, not " +
                  std::to_string(comm.size()));
      return Counted(comm.split(comm.rank() / Plan::group_ranks, comm.rank()));
    }
  }
  std::optional<Counted> make_replica_group(Comm& comm) {
    if constexpr (Plan::group_ranks == 0) {
      return std::nullopt;
    } else {
      if (comm.size() == Plan::group_ranks) return std::nullopt;
      return Counted(comm.split(comm.rank() % Plan::group_ranks, comm.rank()));
    }
  }
  static ShardLayout make_layout_checked(Counted& comm, std::vector<ParameterSpec> params) {
    for (std::size_t i = 1; i < params.size(); ++i)
      require(params[i].layer >= params[i - 1].layer,
              "engine: parameters must be registered layer by layer (group ids ascending)");
    return make_layout(comm, typename Plan::partitioner{}, std::span<const ParameterSpec>(params));
  }
  Counted& shard() { return shard_ ? *shard_ : world_; }
  const Counted& shard() const { return shard_ ? *shard_ : world_; }

  // Where gradients go. Without accumulation every stage reduces each layer as it arrives. With
  // it, stages 2/3 reduce every micro-step into float accumulators (full gradients never
  // accumulate); stages 0/1 add locally and reduce once per step, unless deterministic results
  // are asked for: then they reduce every micro-step too, summing in the same order as 2/3.
  void plan_gradient_flow() {
    const bool accumulating = options_.gradient_accumulation_steps > 1;
    accumulate_locally_ = accumulating && !Plan::gradients && !options_.deterministic;
    const std::size_t target_size = Plan::optimizer_states ? shard_numel_ : total_flat_;
    if (accumulate_locally_) {
      local_accumulator_ = Buffer<float>(total_flat_);
      bucket_dtype_ = DType::float32;
      if constexpr (Plan::optimizer_states) reduced_ = AnyBuffer(DType::float32, target_size);
      target_ = {Plan::optimizer_states ? reduced_.data()
                                        : static_cast<void*>(local_accumulator_.data()),
                 DType::float32, target_size, Delivery::assign};
      return;
    }
    bucket_dtype_ = options_.reduction_dtype();
    if (accumulating) {
      reduced_ = AnyBuffer(DType::float32, target_size);
      target_ = {reduced_.data(), DType::float32, target_size, Delivery::accumulate};
    } else if (!Plan::optimizer_states && bucket_dtype_ == options_.compute_dtype) {
      target_ = {grads_.data(), bucket_dtype_, target_size, Delivery::assign}; // stage 0: in place
    } else {
      reduced_ = AnyBuffer(bucket_dtype_, target_size);
      target_ = {reduced_.data(), bucket_dtype_, target_size, Delivery::assign};
    }
  }

  // The reduced gradients the step reads: full (stage 0) or this rank's shard.
  struct GradSource {
    const void* data;
    DType dtype;
  };
  GradSource grad_source() const { return {target_.data, target_.dtype}; }
  // shard_within plans: every shard group reduced its own ranks' gradients; averaging the shards
  // over the groups completes the average over all ranks.
  void average_over_replicas() {
    visit_dtype(target_.dtype, [&](auto tag) {
      using T = decltype(tag);
      replica_->all_reduce(View<T>(static_cast<T*>(target_.data), target_.size), ReduceOp::avg)
          .wait();
    });
  }

  // --- micro-steps ------------------------------------------------------------------------------
  void begin_micro_step() {
    finish_reduction(); // the previous micro-step's buckets, if still in flight
    const bool boundary = micro_ + 1 == options_.gradient_accumulation_steps;
    if (!accumulate_locally_ || boundary) {
      reducer_->begin(target_);
      reducing_ = true;
    }
  }
  void finish_reduction() {
    if (!reducing_) return;
    reducing_ = false;
    reducer_->finish();
  }

  template <class T>
  static void add_into(float* acc, View<const T> values) {
    constexpr std::size_t tile = 1024;
    alignas(64) float widened[tile];
    for (std::size_t i = 0; i < values.size(); i += tile) {
      const std::size_t m = std::min(tile, values.size() - i);
      convert_n(values.data() + i, widened, m);
      for (std::size_t j = 0; j < m; ++j)
        acc[i + j] += widened[j];
    }
  }

  void clear_accumulators() {
    if (!local_accumulator_.empty())
      std::memset(local_accumulator_.data(), 0, local_accumulator_.size_bytes());
    if (target_.mode == Delivery::accumulate)
      std::memset(target_.data, 0, target_.size * size_of(target_.dtype));
  }

  // --- the update ------------------------------------------------------------------------------
  // f(view of this rank's block of layer g's reduced gradient), in layer order: the same blocks,
  // and so the same sums, under every stage.
  template <class F>
  void for_each_owned_block(F&& f) {
    const GradSource src = grad_source();
    visit_dtype(src.dtype, [&](auto tag) {
      using G = decltype(tag);
      if constexpr (GradientElement<G>) {
        const G* base = static_cast<const G*>(src.data);
        for (std::size_t g = 0; g < layers(); ++g) {
          const LayerInfo& info = layout_.layer(g);
          const std::size_t at = Plan::optimizer_states
                                     ? layout_.block(g, rank_).begin
                                     : info.flat_base + std::size_t(rank_) * info.block_numel;
          f(View<const G>(base + at, info.block_numel));
        }
      }
    });
  }

  // Every shard group holds all gradients once; replicas of a group hold the same values.
  GradNorm global_norm(double local_sum_of_squares, double unscale) {
    return global_grad_norm(shard(), local_sum_of_squares, unscale);
  }

  void update(float grad_multiplier) {
    if constexpr (Plan::parameters) gather_->begin_update();
    const auto optimizer_update = optimizer_.begin_step();
    std::vector<Work> gathers; // stages 1/2: each layer's all-gather overlaps the next update
    visit_compute([&](auto compute_tag) {
      using T = decltype(compute_tag);
      visit_dtype(grad_source().dtype, [&](auto grad_tag) {
        using G = decltype(grad_tag);
        if constexpr (GradientElement<G>)
          update_layers<T, G>(optimizer_update, grad_multiplier, gathers);
      });
    });
    wait_all(gathers);
    if constexpr (Plan::parameters) gather_->end_update(params_);
  }

  // One fused pass per layer over what this rank updates: stage 0 every element (all replicas do
  // the same), stages 1-3 their blocks; the new compute copy is written in the same pass.
  template <class T, class G, class Update>
  void update_layers(const Update& optimizer_update, float grad_multiplier,
                     std::vector<Work>& gathers) {
    const auto* grad_base = static_cast<const G*>(grad_source().data);
    for (std::size_t g = 0; g < layers(); ++g) {
      const LayerInfo& info = layout_.layer(g);
      std::size_t owned_at = info.flat_base, length = info.flat_numel, param_at = info.flat_base;
      if constexpr (Plan::optimizer_states) {
        owned_at = layout_.block(g, rank_).begin;
        length = info.block_numel;
        param_at = Plan::parameters ? owned_at : info.flat_base + std::size_t(rank_) * length;
      }
      View<float> master(master_.data() + owned_at, length);
      std::array<View<float>, states> state;
      for (std::size_t k = 0; k < states; ++k)
        state[k] = View<float>(state_[k].data() + owned_at, length);
      View<const G> grads(grad_base + owned_at, length);
      T* out = params_.as<T>().data() + param_at;
      if constexpr (LowPrecision<T>) {
        fused_step(optimizer_update, master, state, grads, grad_multiplier, View<T>(out, length));
      } else {
        fused_step(optimizer_update, master, state, grads, grad_multiplier);
        std::memcpy(out, master.data(), length * sizeof(float));
      }
      // Stages 1/2: every rank updated its block; an in-place all-gather restores the layer's full
      // compute copy everywhere.
      if constexpr (Plan::optimizer_states && !Plan::parameters)
        gathers.push_back(
            shard().all_gather(params_.as<T>().subview(info.flat_base, info.flat_numel)));
    }
  }

  // --- helpers ----------------------------------------------------------------------------------
  template <class F>
  decltype(auto) visit_compute(F&& f) {
    switch (options_.compute_dtype) {
    case DType::float16:
      return f(half{});
    case DType::bfloat16:
      return f(bfloat16{});
    default:
      return f(float{});
    }
  }
  void check_layer(std::size_t g) const {
    require(g < layout_.layer_count(), "engine: no layer " + std::to_string(g) +
                                           " (the model has " +
                                           std::to_string(layout_.layer_count()) + ")");
  }
  static void add_stats(CommStats& total, const CommStats& more) {
    for (std::size_t i = 0; i < total.by_op.size(); ++i) {
      total.by_op[i].calls += more.by_op[i].calls;
      total.by_op[i].elements += more.by_op[i].elements;
      total.by_op[i].bytes += more.by_op[i].bytes;
    }
  }
  CommStats communication_since_last_step() {
    const CommStats total = communication_total();
    const CommStats step = total - last_total_;
    last_total_ = total;
    return step;
  }

  EngineOptions options_;
  Opt optimizer_;
  Scaler scaler_;
  Counted world_;
  std::optional<Counted> shard_, replica_;
  ShardLayout layout_;
  int rank_;
  std::size_t total_flat_ = 0, shard_numel_ = 0;

  AnyBuffer params_; // stage 0-2: all layers; stage 3: this rank's shard
  std::optional<detail::GatherCache<Counted>> gather_;
  Buffer<float> master_;
  std::array<Buffer<float>, states> state_;
  AnyBuffer grads_;                 // stage 0/1: full gradient, written by backward
  detail::LayerScratch scratch_;    // stage 2/3: one layer's gradient while backward writes it
  AnyBuffer reduced_;               // reduced gradients, when not reduced in place
  Buffer<float> local_accumulator_; // stage 0/1 with gradient accumulation
  DType bucket_dtype_ = DType::float32;
  ReduceTarget target_;
  bool accumulate_locally_ = false;
  std::unique_ptr<BucketedReducer<Counted, Strategy>> reducer_;
  bool reducing_ = false;

  std::vector<bool> arrived_;
  std::size_t arrived_count_ = 0, layers_with_gradients_ = 0;
  int micro_ = 0;
  CommStats last_total_;
  double gather_exposed_before_ = 0;
};

} // namespace zero
