#pragma once
// OptimizerStore<Opt, K, Exec>: the fp32 master weights and the optimizer's moments, kept
// in memory (host or pinned host), and the update, kept as K says (engine/kept.hpp): stages 1-3
// this rank's shard of them (sharded tensors on the model's layout), stage 0 all of them. The
// update is one fused pass per layer over what this rank owns: it reads master, moments and the
// reduced gradient, and writes master, moments and the new compute copy, which the parameter store
// then shares (offload/ has the same store with the states on NVMe).
//
// An optimizer whose step scales each parameter by norms over the whole parameter (LAMB: a
// TrustRatioUpdate) takes three passes instead (engine/trust_ratio_passes.hpp). Element-wise
// optimizers never reach that code.
//
// Adam's and AdamW's moments may be kept in 8 bits (EngineOptions::moments,
// engine/blockwise_moments.hpp), in the store's memory: host memory (ZeRO-Offload's host store
// among them) or a stream space's (device memory, updated by the CUDA 8-bit step).
//
// The master weights may be kept split (EngineOptions::master, engine/split_masters.hpp): the
// compute copy the step writes is then also the master's high part, read back by the next step,
// and this store keeps only the residuals, in its memory. Built for element-wise optimizers.

#include "zero/core/buffer.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/engine/blockwise_moments.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/engine/split_masters.hpp"
#include "zero/engine/trust_ratio_passes.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/stream_step.hpp" // fused_step over HostStreamSpace
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

// The states in host memory, or in the memory of a stream space that runs the step (device memory
// over CudaStreamSpace), which the cold paths reach through host copies (detail/host_staging.hpp).
template <Optimizer Opt, KeptState K, ExecutionSpace Exec>
requires HostAccessibleSpace<typename K::space> ||
    (StreamSpace<Exec>&&
         std::same_as<typename K::space, typename Exec::memory_space>)class OptimizerStore {
  using Space = typename K::space;
  using Tensor = ShardedTensor<float, typename K::policy>;
  static constexpr std::size_t states = Opt::state_tensors;
  // Where 8-bit moments can be kept: Adam's and AdamW's moments.
  static constexpr bool can_quantize = std::same_as<typename Opt::update_type, AdamUpdate>;
  // The 8-bit moments' member, named only where it can exist.
  template <bool Can, class = void>
  struct blockwise_member {
    struct type {};
  };
  template <class Unused>
  struct blockwise_member<true, Unused> {
    using type = std::optional<BlockwiseMoments<Space, Exec>>;
  };
  using MaybeBlockwise = typename blockwise_member<can_quantize>::type;
  // Where split masters can be kept: element-wise updates (the residuals beside the moments, in
  // host or pinned memory updated on the host's threads, or in a stream space's memory).
  static constexpr bool can_split = !TrustRatioUpdate<typename Opt::update_type> &&
                                    (std::same_as<Exec, HostThreads> || StreamSpace<Exec>);
  template <bool Can, class = void>
  struct split_member {
    struct type {};
  };
  template <class Unused>
  struct split_member<true, Unused> {
    using type = std::optional<SplitMasters<Space, Exec>>;
  };
  using MaybeSplit = typename split_member<can_split>::type;

 public:
  using update_type = typename Opt::update_type;

  template <class Comm>
  OptimizerStore(Comm& shard, const ModelLayout& model, const EngineOptions& options, Exec exec)
      : model_(model), exec_(exec) {
    if (options.master != MasterStorage::fp32) {
      if constexpr (can_split)
        split_.emplace(*K::layout(model), K::rank(model), model.layers(), options.master,
                       options.compute_dtype, exec);
      else
        fail_on_every_rank(ErrorKind::unsupported,
                           std::string("engine: split master weights (EngineOptions::master = ") +
                               to_string(options.master) +
                               ") are built for element-wise optimizers (Adam, AdamW, SGD); this "
                               "engine runs " +
                               std::string(Opt::name));
    } else {
      master_.emplace(make(shard));
    }
    if (options.moments == MomentStorage::blockwise_8bit) {
      if constexpr (can_quantize)
        blockwise_.emplace(model, *K::layout(model), K::rank(model), options.eight_bit_min_elements,
                           exec);
      else
        fail_on_every_rank(ErrorKind::unsupported,
                           std::string("engine: 8-bit moments (EngineOptions::moments) are built "
                                       "for Adam and AdamW; this engine runs ") +
                               std::string(Opt::name));
    } else {
      for (std::size_t k = 0; k < states; ++k)
        states_.push_back(make(shard));
    }
    if constexpr (TrustRatioUpdate<typename Opt::update_type>)
      trust_ratio_.emplace(model, K::sharded);
  }

  // Layer l's weights (its parameters in order): this rank's part becomes its master weights.
  void set_layer(std::size_t l, View<const float> values) {
    const auto pack = [&](View<float> block) {
      if constexpr (K::sharded)
        model_.pack_my_block(l, values.data(), block.data());
      else
        convert_n(values.data(), block.data(), values.size());
    };
    if constexpr (can_split)
      if (split_) {
        std::vector<float> block(kept_layout().block(l, kept_rank()).size(), 0.0f);
        pack(View<float>(block));
        split_->write(l, View<const float>(block));
        return;
      }
    detail::write_on_host(exec_, master_->block(l), pack);
  }

  // Split masters: where the compute copy of this rank's block of layer l is (the parameter
  // store's), read to reconstruct the masters outside a step. Does nothing otherwise.
  void bind_compute_copy(
      std::function<SplitComputeBlock<HandedOutMemory<Space>>(std::size_t)> compute_copy) {
    if constexpr (can_split)
      if (split_) split_->bind_compute_copy(std::move(compute_copy));
  }

  // Layer l's master weights, all of them, in order. Collective when sharded.
  template <class Comm>
  std::vector<float> layer(Comm& shard, std::size_t l) const {
    if constexpr (can_split)
      if (split_) { // reconstructed into the store's memory, where the communicator moves it
        Buffer<float, Space> masters(kept_layout().block(l, kept_rank()).size());
        detail::write_on_host(exec_, masters.view(),
                              [&](View<float> into) { split_->read(l, into); });
        return whole_layer(shard, l, std::as_const(masters).view());
      }
    return whole_layer(shard, l, master_->block(l));
  }

  // One update of everything this rank owns, layer by layer: grads(l) is the reduced gradient of
  // the layer's owned block, out(l) where its new compute copy goes; done(l) follows each layer,
  // once its update has run. Over a stream space the updates are queued: done(l) waits for layer
  // l's event while layer l + 1's update is already queued, so the device (or the host stream's
  // worker) runs the next layer while the caller shares this one; everything has run on return.
  template <ElementwiseUpdate U, class Grads, class Out, class Done>
  void step(const U& update, float grad_multiplier, Grads&& grads, Out&& out, Done&& done) {
    for (std::size_t l = 0; l < model_.layers(); ++l) {
      update_layer(update, grad_multiplier, l, grads(l), out(l));
      if constexpr (StreamSpace<Exec>) {
        record(exec_, layer_stepped_.at[l % 2]);
        if (l > 0) done_after_step(l - 1, done);
      } else {
        done(l);
      }
    }
    if constexpr (StreamSpace<Exec>)
      if (model_.layers() > 0) done_after_step(model_.layers() - 1, done);
  }

  // Layer l's part of step(): its update from its reduced gradient block `grad`, its new compute
  // copy into `out` (queued over a stream space). Layers are independent: updating them one by one
  // in any order gives step()'s bits (ZeRO-Offload's speculative update runs them as they land).
  template <ElementwiseUpdate U, class G, class GradSpace, class Out, class OutSpace>
  void update_layer(const U& update, float grad_multiplier, std::size_t l, View<G, GradSpace> grad,
                    View<Out, OutSpace> out) {
    if constexpr (can_split)
      if (split_) return step_split(update, l, grad, grad_multiplier, out);
    if constexpr (can_quantize)
      if (blockwise_)
        return blockwise_->step(update, l, master_->block(l), grad, grad_multiplier, out);
    fused_part(update, grad_multiplier, l, Range{0, master_->block(l).size()}, grad, out);
  }
  // Positions `part` of layer l's block only, `grad` and `out` being that part's: ZeRO-Offload's
  // CPU/GPU split updates the rest on the device (offload/device_share.hpp). fp32 master weights
  // and moments only (a part of 8-bit moments would cut their quantization blocks).
  template <ElementwiseUpdate U, class G, class GradSpace, class Out, class OutSpace>
  void update_part(const U& update, float grad_multiplier, std::size_t l, Range part,
                   View<G, GradSpace> grad, View<Out, OutSpace> out) {
    bool fp32 = master_.has_value();
    if constexpr (can_quantize) fp32 = fp32 && !blockwise_;
    require(fp32, "engine: a part of a layer's update needs fp32 master weights and moments",
            ErrorKind::unsupported);
    fused_part(update, grad_multiplier, l, part, grad, out);
  }

  // f(bytes) with each buffer of layer l's states as this store keeps them (master weights or
  // their residuals, then the moments as fp32 values or codes and scales), in a fixed order: what
  // a snapshot that can undo update_layer() copies. Split masters' high parts are the compute
  // copy's, which the caller saves itself.
  template <class F>
  void for_each_state_block(std::size_t l, F&& f) {
    if constexpr (can_split)
      if (split_) split_->for_each_block(l, f);
    if (master_) f(writable_bytes(master_->block(l)));
    if constexpr (can_quantize)
      if (blockwise_) return blockwise_->for_each_block(l, f);
    for (Tensor& state : states_)
      f(writable_bytes(state.block(l)));
  }

  // The same for a TrustRatioUpdate (LAMB), in three passes; collective over `shard` when the
  // states are sharded.
  template <class Comm, TrustRatioUpdate U, class Grads, class Out, class Done>
  void step(Comm& shard, const U& update, float grad_multiplier, Grads&& grads, Out&& out,
            Done&& done) {
    static_assert(states == 2, "zero: a trust-ratio update keeps two state tensors");
    static_assert(HostAccessibleSpace<Space>,
                  "zero: LAMB's step runs on the host; its device passes (lamb_prepare, "
                  "lamb_apply) have no stream-space overloads yet: keep its states in host memory");
    trust_ratio_->template step<K::sharded>(
        shard, update, grad_multiplier,
        [&](std::size_t l) { return handed_out(master_->block(l)); },
        [&](std::size_t l, std::size_t k) { return handed_out(states_[k].block(l)); }, grads, out,
        done);
  }

  // --- checkpoints ------------------------------------------------------------------------------
  // What this rank keeps: its blocks of this layout (its shard, or rank 0 of the replica).
  const ShardLayout& kept_layout() const noexcept { return *K::layout(model_); }
  int kept_rank() const noexcept { return K::rank(model_); }
  // f(tensor, layer, part, values) over every tensor (0: master weights, then the moments) of
  // every layer: positions `part` of this rank's block. Where f takes a QuantizedMomentView, the
  // 8-bit moments come as their codes and scales; otherwise as fp32 values.
  template <class F>
  void read_states(F&& f) const {
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for (std::size_t t = 0; t < 1 + states; ++t) {
        const auto give = [&](const auto& block) -> decltype(f(t, l, Range{}, block)) {
          return f(t, l, Range{0, block.size()}, block);
        };
        if constexpr (can_split)
          if (split_ && t == 0) {
            std::vector<float> masters(kept_layout().block(l, kept_rank()).size());
            split_->read(l, View<float>(masters));
            give(View<const float>(masters));
            continue;
          }
        if constexpr (can_quantize)
          if (blockwise_ && t > 0) {
            blockwise_->read(l, t - 1, give);
            continue;
          }
        detail::read_on_host(exec_, tensor(t).block(l), give);
      }
  }
  // f(tensor, layer, part, into) fills positions `part` of this rank's block; the store keeps it.
  template <class F>
  void write_states(F&& f) {
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for (std::size_t t = 0; t < 1 + states; ++t) {
        const auto fill = [&](View<float> block) { f(t, l, Range{0, block.size()}, block); };
        if constexpr (can_split)
          if (split_ && t == 0) {
            std::vector<float> masters(kept_layout().block(l, kept_rank()).size());
            fill(View<float>(masters));
            split_->write(l, View<const float>(masters));
            continue;
          }
        if constexpr (can_quantize)
          if (blockwise_ && t > 0) {
            blockwise_->write(l, t - 1, fill);
            continue;
          }
        detail::write_on_host(exec_, tensor(t).block(l), fill);
      }
  }

  // The bytes of the records read_states() hands a checkpoint: every tensor's block of every
  // layer, the 8-bit moments as codes and scales.
  std::size_t state_record_bytes() const noexcept {
    std::size_t total = 0;
    for (std::size_t l = 0; l < model_.layers(); ++l) {
      const std::size_t n = kept_layout().block(l, kept_rank()).size();
      std::size_t moment = n * sizeof(float);
      if constexpr (can_quantize)
        if (blockwise_ && blockwise_->eight_bit(l))
          moment = n + quantized_blocks(n) * sizeof(float);
      total += n * sizeof(float) + states * moment;
    }
    return total;
  }

  StateBytes master_bytes() const noexcept {
    if constexpr (can_split)
      if (split_) return split_->bytes();
    return {master_->bytes_resident(), 0};
  }
  StateBytes state_bytes() const noexcept {
    if constexpr (can_quantize)
      if (blockwise_) return blockwise_->bytes();
    std::size_t total = 0;
    for (const Tensor& state : states_)
      total += state.bytes_resident();
    return {total, 0};
  }
  IoStats nvme_traffic() const noexcept { return {}; } // nothing on NVMe
  std::size_t buffer_bytes() const noexcept { return 0; }

 private:
  // Over a stream space: layer l's update has run (its event passed), then done(l). Two events
  // alternate: at most two layers are queued ahead of the host.
  template <class Done>
  void done_after_step(std::size_t l, Done& done) {
    if (!detail::wait_dropped("optimizer.layer_stepped")) layer_stepped_.at[l % 2].synchronize();
    done(l);
  }

  // Layer l's values from this rank's block `mine` of it (gathered from every rank's when
  // sharded), in order.
  template <class Comm>
  std::vector<float> whole_layer(Comm& shard, std::size_t l, View<const float, Space> mine) const {
    const std::size_t numel = model_.sharded->layer(l).numel;
    std::vector<float> values(numel);
    if constexpr (K::sharded) {
      Buffer<float, Space> image(model_.sharded->layer(l).flat_numel, uninitialized);
      gather_layer_image(shard, *model_.sharded, l, mine, image.view()).wait();
      detail::read_on_host(exec_, std::as_const(image).view(), [&](View<const float> on_host) {
        model_.images.unpack(l, on_host.data(), values.data());
      });
    } else {
      detail::read_on_host(exec_, mine.first(numel), [&](View<const float> on_host) {
        convert_n(on_host.data(), values.data(), numel);
      });
    }
    return values;
  }

  // Positions `part` of layer l's fp32 master weights and moments, updated from `grad`.
  template <ElementwiseUpdate U, class G, class GradSpace, class Out, class OutSpace>
  void fused_part(const U& update, float grad_multiplier, std::size_t l, Range part,
                  View<G, GradSpace> grad, View<Out, OutSpace> out) {
    std::array<View<float, Space>, states> moments;
    for (std::size_t k = 0; k < states; ++k)
      moments[k] = states_[k].block(l).subview(part.begin, part.size());
    fused_step(exec_, update, master_->block(l).subview(part.begin, part.size()), moments, grad,
               grad_multiplier, out);
  }

  const Tensor& tensor(std::size_t t) const { return t == 0 ? *master_ : states_[t - 1]; }
  Tensor& tensor(std::size_t t) { return t == 0 ? *master_ : states_[t - 1]; }

  // Layer l's update over split masters: the compute block `copy` holds the masters' high parts
  // and receives the new ones.
  template <ElementwiseUpdate U, class G, class GradSpace, class Out, class CopySpace>
  void step_split(const U& update, std::size_t l, View<G, GradSpace> grad_view,
                  float grad_multiplier, View<Out, CopySpace> copy) {
    if constexpr (SplitComputeType<Out>) {
      const auto grad = handed_out(grad_view); // host views of pinned memory too
      using ViewMemory = HandedOutMemory<Space>;
      split_->with_masters(
          l, handed_out(copy), [&]<class R>(SplitMasterView<Out, R, ViewMemory> master) {
            if constexpr (can_quantize)
              if (blockwise_) return blockwise_->step(update, l, master, grad, grad_multiplier);
            std::array<View<float, ViewMemory>, states> moments;
            for (std::size_t k = 0; k < states; ++k)
              moments[k] = handed_out(states_[k].block(l));
            if constexpr (StreamSpace<Exec>)
              split_fused_step(exec_, update, master, moments, grad, grad_multiplier);
            else
              split_fused_step(update, master, moments, grad, grad_multiplier);
          });
    } else {
      fail(ErrorKind::unsupported, "engine: split master weights need a float16 or bfloat16 "
                                   "compute copy to write");
    }
  }

  // On the engine's agreed layout (ModelLayout): no verification collective, so that a
  // communicator of device memory, which cannot move the check's host metadata, builds it too.
  template <class Comm>
  Tensor make(Comm& shard) const {
    return Tensor(shard, K::layout(model_), layout_agreed);
  }

  const ModelLayout& model_;
  Exec exec_;
  std::optional<Tensor> master_; // the fp32 masters; none when split_ keeps them
  std::vector<Tensor> states_;   // the fp32 moments; none when blockwise_ keeps them
  [[no_unique_address]] MaybeBlockwise blockwise_;
  [[no_unique_address]] MaybeSplit split_;
  std::optional<TrustRatioPasses> trust_ratio_; // for a TrustRatioUpdate only
  // Over a stream space: the events of the last two layers queued (step()); nothing otherwise.
  template <class E>
  struct LayerEvents {};
  template <StreamSpace E>
  struct LayerEvents<E> {
    typename E::event_type at[2];
  };
  [[no_unique_address]] LayerEvents<Exec> layer_stepped_;
  DrainOnDestruction<Exec> drain_{exec_}; // last: queued updates finish before the states go
};

} // namespace zero
