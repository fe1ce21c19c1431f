#pragma once
// OffloadedOptimizerStore<Inner, K, Exec>: ZeRO-Offload's optimizer store. The parameters and the
// gradients are in the memory of a device stream space (Exec: CudaStreamSpace, or its CPU twin);
// the fp32 master weights and the optimizer's moments stay on the host, in `Inner`, the host
// engine's own store run by the host's threads: in host memory (pinned or not) or on the NVMe
// tier (GPU -> pinned host -> NVMe). During backward, each layer's reduced gradient block leaves
// for the host as soon as it is final (gradient_reduced(), from the gradient store's
// on_layer_reduced): device-to-host on a copy stream of the store's own, after the layer's
// delivery on the engine's stream, into pinned staging memory, an event after each; the copies
// run beside backward's kernels. A step then:
//   1. queues the blocks that have not left yet (a layer the reducer had no bucket of, or all of
//      them when a delayed update was still reading the staging during backward) on the engine's
//      stream, an event after each: the update of a layer starts once its own block is there,
//      while the later ones are still on their way;
//   2. runs Inner's step on the host over the staged gradients; it writes each layer's new compute
//      copy into pinned staging memory;
//   3. as each layer's update completes, queues its compute copy host-to-device on the stream, and
//      hands the layer on (to the parameter store, which shares it) once that copy has run, one
//      layer behind, so that the copy overlaps the next layer's update.
// With the speculative update (EngineOptions::speculative_update, offload/speculative_update.hpp)
// step 2 starts during backward instead: each layer is updated on a thread of its own once its
// block has arrived, with the update the step will make unless it is skipped or clipped; the step
// keeps those updates when its own update and multiplier are the same bits, and otherwise undoes
// them from their snapshots and runs as above.
// With a ratio below 1 (EngineOptions::offload_ratio, offload/device_share.hpp) the host updates
// only its share of each layer's block, which alone goes through the staging; the rest is updated
// in device memory by the device's step, queued at the start of step 2.
// The update is the host store's own, so the weights are the host engine's bits given the same
// reduced gradients. The copies and their staging are offload/offload_staging.hpp's.
//
// A program whose placement offloads the optimizer states includes this header (the NVMe tier's
// stores, <zero/offload/nvme_stores.hpp>, include it for GPU -> pinned host -> NVMe):
//
//   #include <zero/engine/cuda_engine.hpp>
//   #include <zero/offload/offloaded_optimizer_store.hpp>
//   using Where = zero::Placement<zero::execute_on<zero::CudaStreamSpace>,
//                                 zero::optimizer_states_in<zero::host>>;

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/model_states.hpp"
#include "zero/engine/optimizer_store.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/offload/device_share.hpp"
#include "zero/offload/offload_staging.hpp"
#include "zero/offload/speculative_update.hpp"
#include "zero/optim/optimizer.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

namespace detail {
// A host store whose update can be speculated: layer by layer, its states' bytes reachable for a
// snapshot, its update comparable bit for bit (the in-memory store with Adam, AdamW or SGD; not
// the NVMe tier's, whose states move in sub-groups).
template <class Inner>
concept SpeculatingStore = requires(Inner& inner) {
  typename Inner::update_type;
  inner.for_each_state_block(std::size_t{}, [](auto) {});
}
&&ComparableUpdate<typename Inner::update_type>;
// ... whose update is U.
template <class Inner, class U>
concept SpeculatesWith = SpeculatingStore<Inner> && std::same_as<U, typename Inner::update_type>;

template <class Inner, bool = SpeculatingStore<Inner>>
struct speculation_of {
  struct type {};
};
template <class Inner>
struct speculation_of<Inner, true> {
  using type = std::optional<SpeculativeUpdate<typename Inner::update_type>>;
};
} // namespace detail

template <class Inner, KeptState K, SideStreams Exec>
class OffloadedOptimizerStore {
  // The host views Inner's step takes: its own memory space, or host for the NVMe tier's (whose
  // step runs over its bounce buffers in host memory).
  using HostSpace =
      std::conditional_t<HostAccessibleSpace<typename K::space>, typename K::space, host>;
  static constexpr bool can_speculate = detail::SpeculatingStore<Inner>;
  // Where the update can be split with the device: the same stores (element-wise, in memory).
  static constexpr bool can_share = detail::SpeculatingStore<Inner>;

 public:
  // `control`: a host communicator of the shard group (the states are host memory, which a
  // communicator of device memory does not take).
  template <class Comm>
  OffloadedOptimizerStore(Comm& control, const ModelLayout& model, const EngineOptions& options,
                          Exec exec)
      : inner_(control, model, options, HostThreads{}), exec_(exec),
        staging_(host_blocks(model, options), options.reduced_gradient_dtype(),
                 options.compute_dtype, options.master != MasterStorage::fp32, exec),
        delay_after_(options.delayed_parameter_update_after), writes_copy_(model.layers(), 0) {
    // Split masters: the staged weights are the compute copy last sent to the device, which the
    // host's step reads as the masters' high parts (the device's copy is never read back).
    if constexpr (requires(Inner & inner) { inner.bind_compute_copy({}); })
      if (options.master != MasterStorage::fp32)
        inner_.bind_compute_copy([this](std::size_t l) -> SplitComputeBlock<> {
          if (staging_.compute_dtype() == DType::bfloat16)
            return handed_out(staging_.template weights<bfloat16>(l));
          return handed_out(staging_.template weights<half>(l));
        });
    if (options.offload_ratio < 1) share(model, options);
    if (options.speculative_update) {
      if constexpr (can_speculate)
        speculation_.emplace(staging_.layers(),
                             speculated_states(options.master != MasterStorage::fp32));
      else if constexpr (requires { typename Inner::update_type; })
        fail_on_every_rank(ErrorKind::unsupported,
                           "speculative_update: LAMB's trust ratios need norms over whole "
                           "parameters, summed over the ranks at the step; the speculative "
                           "update is built for element-wise optimizers (Adam, AdamW, SGD)");
      else
        fail_on_every_rank(ErrorKind::unsupported,
                           "speculative_update updates layer by layer in host memory; on the NVMe "
                           "tier the states move in sub-groups: keep them in host memory");
    }
  }

  OffloadedOptimizerStore(const OffloadedOptimizerStore&) = delete;
  OffloadedOptimizerStore& operator=(const OffloadedOptimizerStore&) = delete;

  void set_layer(std::size_t l, View<const float> values) {
    read_as_they_stand();
    inner_.set_layer(l, values);
    if constexpr (can_share)
      if (share_) share_->upload(inner_, l);
  }
  template <class Comm>
  std::vector<float> layer(Comm& control, std::size_t l) {
    read_as_they_stand();
    return inner_.layer(control, l);
  }

  // grads(l): the reduced gradient of layer l's owned block in device memory; out(l): where its
  // new compute copy goes in device memory; done(l) once it is there (see the top of this file).
  // With the delayed parameter update on, the update runs on after the call instead (below).
  template <ElementwiseUpdate U, class Grads, class Out, class Done>
  void step(const U& update, float grad_multiplier, Grads&& grads, Out&& out, Done&& done) {
    if (delay_after_ >= 0 && updates_ >= std::uint64_t(delay_after_)) {
      delayed_step(update, grad_multiplier, grads, out, done);
      return;
    }
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    staging_.template require_types<G, T>();
    auto host_grads = host_part(grads);
    auto host_out = host_part(out);
    staging_.stage(host_grads);
    // While the host updates; only into a compute copy in device memory (a host one, offload_param,
    // refuses a share: model_states.hpp).
    if constexpr (!decltype(out(std::size_t{}))::memory_space::host_accessible)
      if (share_) share_->update(update, grad_multiplier, grads, out);
    // A layer is handed on once both parts of it are: the host's copied back, the device's waited
    // for by the engine's stream.
    auto handed_on = [&](std::size_t l) {
      if (share_) share_->order_layer(l);
      done(l);
    };
    if (!speculated_step(update, grad_multiplier, host_grads, host_out, handed_on))
      staged_step(host_grads, host_out, handed_on, [&](auto& staged, auto& into, auto& host_done) {
        if constexpr (can_share)
          if (share_) {
            for (std::size_t l = 0; l < staging_.layers(); ++l) {
              update_host(update, grad_multiplier, l, staged(l), into(l));
              host_done(l);
            }
            return;
          }
        inner_.step(update, grad_multiplier, staged, into, host_done);
      });
    if (share_) split_ = share_->finish();
    ++updates_;
  }
  // A TrustRatioUpdate (LAMB): Inner combines its per-parameter sums over `control`.
  template <class Comm, TrustRatioUpdate U, class Grads, class Out, class Done>
  void step(Comm& control, const U& update, float grad_multiplier, Grads&& grads, Out&& out,
            Done&& done) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    staging_.template require_types<G, T>();
    staging_.stage(grads);
    staged_step(grads, out, done, [&](auto& host_grads, auto& host_out, auto& host_done) {
      inner_.step(control, update, grad_multiplier, host_grads, host_out, host_done);
    });
    ++updates_;
  }

  // --- gradients during backward ---------------------------------------------------------------
  // Layer l's reduced gradient block, `block` (what grads(l) will give the step), is final: it
  // leaves for the host now (OffloadStaging::send_early), and, when this step speculates, is
  // updated once it has arrived. Called on the thread that runs the steps. Not while a delayed
  // update may still read the staging (its next step stages every block itself).
  template <class G, class Memory>
  void gradient_reduced(std::size_t l, View<const G, Memory> block) {
    if (pending_.valid()) return;
    staging_.send_early(l, share_ ? block.first(share_->cut(l)) : block);
    if constexpr (can_speculate)
      if (speculation_ && speculation_->active()) speculation_->landed(l);
  }
  // The reduced gradients changed after they were final (averaged over the replica group): the
  // step sends them again, and speculation, which they would always undo, turns off.
  void gradients_changed() {
    if constexpr (can_speculate)
      if (speculation_ && speculation_->on())
        speculation_->turn_off("the plan averages the reduced gradients over replica groups "
                               "after they land (shard_within), so they are final only at the "
                               "step");
    staging_.forget_early();
  }
  // After a step, applied or skipped (what a skipped step speculated is undone here). The staging
  // ends its step even when the speculation's worker failed, whose failure is rethrown last.
  void end_step() {
    std::exception_ptr failure;
    if constexpr (can_speculate)
      if (speculation_ && speculation_->active()) try {
          speculation_->finish();
          speculation_->roll_back(false);
        } catch (...) {
          failure = std::current_exception();
        }
    report_ = {staging_.end_step(), speculation_report(), std::exchange(split_, {})};
    if constexpr (can_speculate)
      if (speculation_) speculation_->end_step();
    if (failure) std::rethrow_exception(failure);
  }
  // What the step that ended last did.
  const OffloadStepReport& step_report() const noexcept { return report_; }
  // The copies and their staging (the tests reach its copy stream).
  OffloadStaging<Exec, HostSpace>& staging() noexcept { return staging_; }

  // --- the speculative update ------------------------------------------------------------------
  // The step's update and gradient multiplier unless it is skipped or clipped, at the start of the
  // last micro-step's backward: each layer whose block leaves from now on (gradient_reduced) is
  // updated on the host as soon as it has arrived, G the reduced gradient's type and T the compute
  // copy's. Nothing happens without speculation, once it turned itself off, or while a delayed
  // update runs.
  template <class G, class T, ElementwiseUpdate U>
  void speculate(const U& update, float grad_multiplier) {
    if constexpr (detail::SpeculatesWith<Inner, U>) {
      if (!speculation_ || !speculation_->on() || pending_.valid()) return;
      staging_.template require_types<G, T>();
      speculation_->begin(update, grad_multiplier,
                          [this](std::size_t l, const U& speculated, float multiplier) {
                            // A thread of its own starts on device 0: the stream's device first.
                            if constexpr (requires { exec_.make_current(); }) exec_.make_current();
                            staging_.speculated_arrived(l);
                            update_staged<G, T>(speculated, multiplier, l);
                          });
    }
  }

  // --- the delayed parameter update (docs/zero-offload.md) ---------------------------------------
  // Whether an update still runs on the host, its weights not sent yet.
  bool update_pending() const noexcept { return pending_.valid(); }
  // Waits for it (rethrowing its failure) and sends its weights: out(l) and done(l) as in step().
  template <class Out, class Done>
  void finish_delayed_update(Out&& out, Done&& done) {
    if (!pending_.valid()) return;
    std::exchange(pending_, {}).get();
    send_all<typename decltype(out(std::size_t{}))::value_type>(out, done);
  }

  // --- checkpoints: the host store's own --------------------------------------------------------
  const ShardLayout& kept_layout() const noexcept { return inner_.kept_layout(); }
  int kept_rank() const noexcept { return inner_.kept_rank(); }
  template <class F>
  void read_states(F&& f) { // not const: the NVMe tier's reads go through its bounce buffers
    read_as_they_stand();
    inner_.read_states(std::forward<F>(f));
  }
  template <class F>
  void write_states(F&& f) {
    read_as_they_stand(); // what f leaves alone stays as it is
    // The device's share takes what was written, also when f fails midway (a corrupt checkpoint):
    // both sides then hold the same states.
    try {
      inner_.write_states(std::forward<F>(f));
    } catch (...) {
      upload_share();
      throw;
    }
    upload_share();
  }
  std::size_t state_record_bytes() const noexcept requires requires(const Inner& inner) {
    inner.state_record_bytes();
  }
  { return inner_.state_record_bytes(); }

  StateBytes master_bytes() const noexcept { return inner_.master_bytes(); }
  StateBytes state_bytes() const noexcept { return inner_.state_bytes(); }
  IoStats nvme_traffic() const { return inner_.nvme_traffic(); }
  // ZeRO-Offload's CPU/GPU split: the device's share of the master weights and moments.
  std::size_t device_share_bytes() const noexcept { return share_ ? share_->bytes() : 0; }
  // The host store's, the staging, and the speculative update's snapshots.
  std::size_t buffer_bytes() const noexcept {
    std::size_t snapshots = 0;
    if constexpr (can_speculate)
      if (speculation_) snapshots = speculation_->snapshot_bytes();
    return inner_.buffer_bytes() + staging_.bytes() + snapshots;
  }

 private:
  // The elements of each layer this rank updates.
  static std::vector<std::size_t> block_sizes(const ModelLayout& model) {
    std::vector<std::size_t> blocks;
    for (std::size_t l = 0; l < model.layers(); ++l)
      blocks.push_back(K::layout(model)->block(l, K::rank(model)).size());
    return blocks;
  }

  // The elements of each layer the host updates: all of them, or its share (offload_ratio).
  static std::vector<std::size_t> host_blocks(const ModelLayout& model,
                                              const EngineOptions& options) {
    if (options.offload_ratio < 1)
      return DeviceShare<Exec>::host_part(block_sizes(model), options.offload_ratio);
    return block_sizes(model);
  }
  // The rest of each block kept and updated in device memory, where the store can split.
  void share(const ModelLayout& model, const EngineOptions& options) {
    if constexpr (can_share) {
      if (options.moments != MomentStorage::fp32 || options.master != MasterStorage::fp32)
        fail_on_every_rank(ErrorKind::unsupported,
                           "offload_ratio below 1 splits each layer's block between the CPU and "
                           "the GPU; with 8-bit moments or split master weights the cut would fall "
                           "inside their blocks: keep fp32 master weights and moments, or a ratio "
                           "of 1");
      share_.emplace(block_sizes(model), options.offload_ratio,
                     1 + Inner::update_type::state_tensors, exec_);
    } else if constexpr (requires { typename Inner::update_type; }) {
      fail_on_every_rank(ErrorKind::unsupported,
                         "offload_ratio below 1: LAMB's trust ratios need norms over whole "
                         "parameters; the CPU/GPU split is built for element-wise optimizers "
                         "(Adam, AdamW, SGD)");
    } else {
      fail_on_every_rank(ErrorKind::unsupported,
                         "offload_ratio below 1 keeps part of the states in device memory beside "
                         "host memory; on the NVMe tier it is not built: keep them in host memory, "
                         "or a ratio of 1");
    }
  }
  // The host store's states of the device's share copied to the device, every layer.
  void upload_share() {
    if constexpr (can_share)
      if (share_)
        for (std::size_t l = 0; l < staging_.layers(); ++l)
          share_->upload(inner_, l);
  }
  // grads or out restricted to the host's share of each block (empty views stay empty).
  template <class F>
  auto host_part(F& f) {
    return [this, &f](std::size_t l) {
      const auto whole = f(l);
      return share_ && !whole.empty() ? whole.first(share_->cut(l)) : whole;
    };
  }
  // Layer l's host update: all of its block, or the host's share.
  template <class U, class G, class GradSpace, class T, class OutSpace>
  void update_host(const U& update, float grad_multiplier, std::size_t l, View<G, GradSpace> grad,
                   View<T, OutSpace> out) {
    if constexpr (can_share)
      if (share_)
        return inner_.update_part(update, grad_multiplier, l, Range{0, share_->cut(l)}, grad, out);
    inner_.update_layer(update, grad_multiplier, l, grad, out);
  }

  // Every layer's staged compute copy sent, done(l) in layer order.
  template <class T, class Out, class Done>
  void send_all(Out& out, Done& done) {
    std::optional<std::size_t> sent;
    for (std::size_t l = 0; l < staging_.layers(); ++l)
      staging_.template send<T>(l, out, done, sent);
    staging_.hand_on(done, sent);
  }

  // The step, once the gradients were staged: Inner's update run over them (by `run`), each
  // layer's compute copy sent as its update completes.
  template <class Grads, class Out, class Done, class Run>
  void staged_step(Grads& grads, Out& out, Done& done, Run&& run) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    std::vector<char> arrived(staging_.layers(), 0);
    auto host_grads = [&](std::size_t l) {
      if (arrived.at(l) == 0) {
        staging_.arrived(l);
        arrived[l] = 1;
      }
      return View<const G, HostSpace>(staging_.template gradients<G>(l));
    };
    auto host_out = [&](std::size_t l) {
      return out(l).empty() ? View<T, HostSpace>{} : staging_.template weights<T>(l);
    };
    std::optional<std::size_t> sent;
    auto host_done = [&](std::size_t l) { staging_.template send<T>(l, out, done, sent); };
    run(host_grads, host_out, host_done);
    staging_.hand_on(done, sent);
  }

  // The speculative step, once the gradients were staged: when this step's update and multiplier
  // are the speculated ones, the
  // layers updated during backward stand, the others are updated now, and every layer's compute
  // copy is sent; true then. Otherwise whatever was speculated is undone, and the caller steps.
  template <class U, class Grads, class Out, class Done>
  bool speculated_step(const U& update, float grad_multiplier, Grads& grads, Out& out, Done& done) {
    if constexpr (detail::SpeculatesWith<Inner, U>) {
      if (!speculation_ || !speculation_->active()) return false;
      using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
      using T = typename decltype(out(std::size_t{}))::value_type;
      speculation_->finish();
      bool same = speculation_->matches(update, grad_multiplier);
      for (std::size_t l = 0; l < staging_.layers() && same; ++l) // the targets it wrote for
        same = out(l).size() == staging_.block_size(l);
      if (!same) {
        speculation_->roll_back(true);
        return false;
      }
      for (std::size_t l = 0; l < staging_.layers(); ++l)
        if (!speculation_->updated(l)) {
          staging_.arrived(l);
          update_staged<G, T>(update, grad_multiplier, l);
        }
      speculation_->keep();
      send_all<T>(out, done);
      return true;
    } else {
      return false;
    }
  }

  // Layer l's update over its staged gradient, into its staged compute copy.
  template <class G, class T, class U>
  void update_staged(const U& update, float grad_multiplier, std::size_t l) {
    update_host(update, grad_multiplier, l,
                View<const G, HostSpace>(staging_.template gradients<G>(l)),
                staging_.template weights<T>(l));
  }

  // Between steps the states are read or written as they stand: what a step begun
  // speculatively updated is undone (its step will update it again), and the host store's copy of
  // the device's share brought up to date.
  void read_as_they_stand() {
    if constexpr (can_speculate)
      if (speculation_ && speculation_->active()) speculation_->cancel();
    if constexpr (can_share)
      if (share_) share_->download(inner_);
  }
  // What speculation did in this step (all zero without it).
  SpeculationReport speculation_report() const {
    if constexpr (can_speculate)
      if (speculation_) return speculation_->report();
    return {};
  }

  // f(bytes) over the buffers layer l's update changes, as a snapshot holds them: its states as the
  // host store keeps them (pinned memory too; of a block split with the device, the host's share),
  // and, with split masters, the staged compute copy that holds their high parts.
  auto speculated_states(bool split_masters) {
    return [this, split_masters](std::size_t l, auto&& f) {
      inner_.for_each_state_block(l, [&](auto block) {
        const View<std::byte> bytes = handed_out(block);
        f(share_ ? bytes.first(share_->cut(l) * sizeof(float)) : bytes);
      });
      if (split_masters) f(handed_out(writable_bytes(staging_.template weights<std::uint16_t>(l))));
    };
  }

  // The delayed parameter update (DPU): the update of the step before sends its weights now
  // (this step's forward and backward ran on the ones before them); this step's gradients are
  // staged, and its update starts on a thread of its own, overlapping the next step's forward and
  // backward until the next step (or anything that reads the states) sends its weights.
  template <class U, class Grads, class Out, class Done>
  void delayed_step(const U& update, float grad_multiplier, Grads& grads, Out& out, Done& done) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    staging_.template require_types<G, T>();
    finish_delayed_update(out, done);
    staging_.stage(grads);
    for (std::size_t l = 0; l < staging_.layers(); ++l)
      writes_copy_[l] = out(l).empty() ? 0 : 1;
    staging_.all_arrived();
    // The update is copied in (an ElementwiseUpdate is trivially copyable): the optimizer begins
    // its next step before this one ends.
    pending_ = std::async(std::launch::async, [this, update, grad_multiplier] {
      inner_.step(
          update, grad_multiplier,
          [this](std::size_t l) {
            return View<const G, HostSpace>(staging_.template gradients<G>(l));
          },
          [this](std::size_t l) {
            return writes_copy_[l] != 0 ? staging_.template weights<T>(l) : View<T, HostSpace>{};
          },
          [](std::size_t) {});
    });
    ++updates_;
  }

  Inner inner_;
  Exec exec_;
  OffloadStaging<Exec, HostSpace> staging_; // after inner_: its copies end before the states go
  std::int64_t delay_after_;                // updates before the DPU starts (-1: never)
  std::uint64_t updates_ = 0;               // step() calls so far
  std::vector<char> writes_copy_;           // the pending update writes layer l's compute copy
  OffloadStepReport report_;                // of the step that ended last
  SplitReport split_;                       // of the step that is ending
  // The device's share of each block (offload_ratio below 1). Before the speculation: its
  // snapshots are cut to the host's share.
  std::optional<DeviceShare<Exec>> share_;
  // Last: the threads that use the staging and the states are joined first.
  [[no_unique_address]] typename detail::speculation_of<Inner>::type speculation_;
  std::future<void> pending_; // the update running on the host (DPU)
};

namespace detail {
// The engine's optimizer store for states in host memory beside a device space.
template <Optimizer Opt, KeptState K, ExecutionSpace Exec>
requires offloaded_from<typename K::space, Exec>
struct optimizer_store_for<Opt, K, Exec> {
  using type = OffloadedOptimizerStore<OptimizerStore<Opt, K, HostThreads>, K, Exec>;
};
} // namespace detail

} // namespace zero
