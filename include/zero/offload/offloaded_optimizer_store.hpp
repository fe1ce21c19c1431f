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
// The update is the host store's own, so the weights are the host engine's bits given the same
// reduced gradients. The host waits on the events of its own copies only, never on the device.
// The staging memory (one block of gradients and one of compute copy per element this rank
// updates, in their element types) is allocated once, here, and reported as buffers.
//
// A program whose placement offloads the optimizer states includes this header (the NVMe tier's
// stores, <zero/offload/nvme_stores.hpp>, include it for GPU -> pinned host -> NVMe):
//
//   #include <zero/engine/cuda_engine.hpp>
//   #include <zero/offload/offloaded_optimizer_store.hpp>
//   using Where = zero::Placement<zero::execute_on<zero::CudaStreamSpace>,
//                                 zero::optimizer_states_in<zero::host>>;

#include "zero/core/buffer.hpp"
#include "zero/core/dropped_waits.hpp"
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
#include "zero/optim/optimizer.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

template <class Inner, KeptState K, SideStreams Exec>
class OffloadedOptimizerStore {
  // The host views Inner's step takes: its own memory space, or host for the NVMe tier's (whose
  // step runs over its bounce buffers in host memory).
  using HostSpace =
      std::conditional_t<HostAccessibleSpace<typename K::space>, typename K::space, host>;
  using Event = typename Exec::event_type;

 public:
  // `control`: a host communicator of the shard group (the states are host memory, which a
  // communicator of device memory does not take).
  template <class Comm>
  OffloadedOptimizerStore(Comm& control, const ModelLayout& model, const EngineOptions& options,
                          Exec exec)
      : inner_(control, model, options, HostThreads{}), exec_(exec),
        gradient_dtype_(options.reduced_gradient_dtype()), compute_dtype_(options.compute_dtype),
        offsets_(block_offsets(model)),
        staged_gradients_(offsets_.back() * size_of(gradient_dtype_), uninitialized),
        staged_weights_(staged_weights(offsets_.back() * size_of(compute_dtype_), options)),
        gradients_arrived_(model.layers()), weights_sent_(model.layers()),
        delay_after_(options.delayed_parameter_update_after), writes_copy_(model.layers(), 0),
        sent_early_(model.layers(), 0) {
    // Split masters: the staged weights are the compute copy last sent to the device, which the
    // host's step reads as the masters' high parts (the device's copy is never read back).
    if constexpr (requires(Inner & inner) { inner.bind_compute_copy({}); })
      if (options.master != MasterStorage::fp32)
        inner_.bind_compute_copy([this](std::size_t l) -> SplitComputeBlock<> {
          if (compute_dtype_ == DType::bfloat16)
            return handed_out(staged<bfloat16>(staged_weights_, l));
          return handed_out(staged<half>(staged_weights_, l));
        });
  }

  OffloadedOptimizerStore(const OffloadedOptimizerStore&) = delete;
  OffloadedOptimizerStore& operator=(const OffloadedOptimizerStore&) = delete;

  void set_layer(std::size_t l, View<const float> values) { inner_.set_layer(l, values); }
  template <class Comm>
  std::vector<float> layer(Comm& control, std::size_t l) {
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
    staged_step(grads, out, done, [&](auto& host_grads, auto& host_out, auto& host_done) {
      inner_.step(update, grad_multiplier, host_grads, host_out, host_done);
    });
    ++updates_;
  }
  // A TrustRatioUpdate (LAMB): Inner combines its per-parameter sums over `control`.
  template <class Comm, TrustRatioUpdate U, class Grads, class Out, class Done>
  void step(Comm& control, const U& update, float grad_multiplier, Grads&& grads, Out&& out,
            Done&& done) {
    staged_step(grads, out, done, [&](auto& host_grads, auto& host_out, auto& host_done) {
      inner_.step(control, update, grad_multiplier, host_grads, host_out, host_done);
    });
    ++updates_;
  }

  // --- gradients during backward ---------------------------------------------------------------
  // Layer l's reduced gradient block, `block` (what grads(l) will give the step), is final: it
  // leaves for the host now, on the copy stream, after the work queued on the engine's stream so
  // far (its delivery). Called on the thread that runs the steps. Not while a delayed update may
  // still read the staging (its next step stages every block itself).
  template <class G, class Memory>
  void gradient_reduced(std::size_t l, View<const G, Memory> block) {
    if (pending_.valid()) return;
    require_gradient_type<G>();
    const Exec copies = copy_stream_.space();
    record(exec_, reduced_);
    if (!detail::wait_dropped("offload.gradient_reduced")) wait(copies, reduced_);
    copy(copies, block, staged<G>(staged_gradients_, l));
    record(copies, gradients_arrived_.at(l));
    record(copies, early_copies_read_);
    sent_early_[l] = 1;
  }
  // The reduced gradients changed after they were final (averaged over the replica group): the
  // blocks sent early are sent again by the step. The host waits for their copies first, so that
  // the change does not race with their reads.
  void gradients_changed() {
    for (std::size_t l = 0; l < sent_early_.size(); ++l)
      if (std::exchange(sent_early_[l], 0) != 0) gradients_arrived_[l].synchronize();
  }
  // After a step, applied or skipped: later work on the engine's stream (the next step's deliveries
  // into the reduced gradients) is ordered after the copies that read them. No result depends on
  // it (a skipped step's staging is never read, and the next copies overwrite it in stream order),
  // so it is not a site of dropped waits: it keeps the two streams' accesses ordered, which is
  // what a race detector checks over the twin.
  void end_step() {
    wait(exec_, early_copies_read_);
    std::fill(sent_early_.begin(), sent_early_.end(), 0);
  }
  // How many layers' gradients left for the host during the last step's backward.
  std::size_t gradients_sent_in_backward() const noexcept { return sent_in_backward_; }

  // --- the delayed parameter update (docs/zero-offload.md) ---------------------------------------
  // Whether an update still runs on the host, its weights not sent yet.
  bool update_pending() const noexcept { return pending_.valid(); }
  // Waits for it (rethrowing its failure) and sends its weights: out(l) and done(l) as in step().
  template <class Out, class Done>
  void finish_delayed_update(Out&& out, Done&& done) {
    if (!pending_.valid()) return;
    std::exchange(pending_, {}).get();
    using T = typename decltype(out(std::size_t{}))::value_type;
    std::optional<std::size_t> sent;
    for (std::size_t l = 0; l + 1 < offsets_.size(); ++l)
      send<T>(l, out, done, sent);
    hand_on(done, sent);
  }

  // --- checkpoints: the host store's own --------------------------------------------------------
  const ShardLayout& kept_layout() const noexcept { return inner_.kept_layout(); }
  int kept_rank() const noexcept { return inner_.kept_rank(); }
  template <class F>
  void read_states(F&& f) { // not const: the NVMe tier's reads go through its bounce buffers
    inner_.read_states(std::forward<F>(f));
  }
  template <class F>
  void write_states(F&& f) {
    inner_.write_states(std::forward<F>(f));
  }
  std::size_t state_record_bytes() const noexcept requires requires(const Inner& inner) {
    inner.state_record_bytes();
  }
  { return inner_.state_record_bytes(); }

  StateBytes master_bytes() const noexcept { return inner_.master_bytes(); }
  StateBytes state_bytes() const noexcept { return inner_.state_bytes(); }
  IoStats nvme_traffic() const { return inner_.nvme_traffic(); }
  std::size_t buffer_bytes() const noexcept {
    return inner_.buffer_bytes() + staged_gradients_.size() + staged_weights_.size();
  }

 private:
  // The staging of the compute copy sent to the device: zeros, as the device's copy starts, where
  // split masters read it as the weights' high parts.
  static Buffer<std::byte, pinned_host> staged_weights(std::size_t bytes,
                                                       const EngineOptions& options) {
    if (options.master != MasterStorage::fp32) return Buffer<std::byte, pinned_host>(bytes);
    return Buffer<std::byte, pinned_host>(bytes, uninitialized);
  }

  // Where each layer's block starts among the elements this rank updates (the last entry: all).
  static std::vector<std::size_t> block_offsets(const ModelLayout& model) {
    std::vector<std::size_t> offsets{0};
    for (std::size_t l = 0; l < model.layers(); ++l)
      offsets.push_back(offsets.back() + K::layout(model)->block(l, K::rank(model)).size());
    return offsets;
  }

  // Layer l's block of staging memory as elements of E.
  template <class E>
  View<E, HostSpace> staged(Buffer<std::byte, pinned_host>& bytes, std::size_t l) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the buffer was sized for E
    E* first = reinterpret_cast<E*>(bytes.data()) + offsets_[l];
    return {first, offsets_[l + 1] - offsets_[l]};
  }

  template <class Grads, class Out, class Done, class Run>
  void staged_step(Grads& grads, Out& out, Done& done, Run&& run) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    require_staging_types<G, T>();
    const std::size_t layers = offsets_.size() - 1;
    stage_gradients(grads);
    std::vector<char> arrived(layers, 0);
    auto host_grads = [&](std::size_t l) {
      if (arrived.at(l) == 0) {
        if (!detail::wait_dropped("offload.gradients_arrived")) gradients_arrived_[l].synchronize();
        arrived[l] = 1;
      }
      return View<const G, HostSpace>(staged<G>(staged_gradients_, l));
    };
    auto host_out = [&](std::size_t l) {
      return out(l).empty() ? View<T, HostSpace>{} : staged<T>(staged_weights_, l);
    };
    std::optional<std::size_t> sent;
    auto host_done = [&](std::size_t l) { send<T>(l, out, done, sent); };
    run(host_grads, host_out, host_done);
    hand_on(done, sent);
  }

  // Queues layer l's new compute copy host-to-device, then hands on the layer sent before it
  // (`sent`: queued, not handed on yet), whose copy has run once its event passed: one layer
  // behind, so that a copy overlaps the next layer's update.
  template <class T, class Out, class Done>
  void send(std::size_t l, Out& out, Done& done, std::optional<std::size_t>& sent) {
    const auto target = out(l);
    if (!target.empty())
      copy(exec_, View<const T, HostSpace>(staged<T>(staged_weights_, l)), target);
    record(exec_, weights_sent_.at(l));
    hand_on(done, sent);
    sent = l;
  }
  template <class Done>
  void hand_on(Done& done, std::optional<std::size_t>& sent) {
    if (!sent) return;
    if (!detail::wait_dropped("offload.weights_sent")) weights_sent_[*sent].synchronize();
    done(*std::exchange(sent, std::nullopt));
  }

  // The delayed parameter update (DPU): the update of the step before sends its weights now
  // (this step's forward and backward ran on the ones before them); this step's gradients are
  // staged, and its update starts on a thread of its own, overlapping the next step's forward and
  // backward until the next step (or anything that reads the states) sends its weights.
  template <class U, class Grads, class Out, class Done>
  void delayed_step(const U& update, float grad_multiplier, Grads& grads, Out& out, Done& done) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    using T = typename decltype(out(std::size_t{}))::value_type;
    require_staging_types<G, T>();
    finish_delayed_update(out, done);
    const std::size_t layers = offsets_.size() - 1;
    stage_gradients(grads);
    for (std::size_t l = 0; l < layers; ++l) {
      writes_copy_[l] = out(l).empty() ? 0 : 1;
      if (!detail::wait_dropped("offload.delayed_gradients_arrived"))
        gradients_arrived_[l].synchronize();
    }
    // The update is copied in (an ElementwiseUpdate is trivially copyable): the optimizer begins
    // its next step before this one ends.
    pending_ = std::async(std::launch::async, [this, update, grad_multiplier] {
      inner_.step(
          update, grad_multiplier,
          [this](std::size_t l) {
            return View<const G, HostSpace>(staged<G>(staged_gradients_, l));
          },
          [this](std::size_t l) {
            return writes_copy_[l] != 0 ? staged<T>(staged_weights_, l) : View<T, HostSpace>{};
          },
          [](std::size_t) {});
    });
    ++updates_;
  }

  // Queues the copy of every block that did not leave during backward on the engine's stream, an
  // event after each (layer l's block has arrived once gradients_arrived_[l] passed), and counts
  // those that did.
  template <class Grads>
  void stage_gradients(Grads& grads) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    sent_in_backward_ = 0;
    for (std::size_t l = 0; l + 1 < offsets_.size(); ++l) {
      if (sent_early_[l] != 0) {
        ++sent_in_backward_;
        continue;
      }
      copy(exec_, grads(l), staged<G>(staged_gradients_, l));
      record(exec_, gradients_arrived_[l]);
    }
  }

  template <class G>
  void require_gradient_type() const {
    require(dtype_of<G> == gradient_dtype_,
            std::string("offloaded optimizer: staging was sized for ") +
                to_string(gradient_dtype_) + " gradients, the reduced gradient is " +
                to_string(dtype_of<G>),
            ErrorKind::mismatch);
  }
  template <class G, class T>
  void require_staging_types() const {
    require(dtype_of<G> == gradient_dtype_ && dtype_of<T> == compute_dtype_,
            std::string("offloaded optimizer step: staging was sized for ") +
                to_string(gradient_dtype_) + " gradients and a " + to_string(compute_dtype_) +
                " compute copy, the step has " + to_string(dtype_of<G>) + " and " +
                to_string(dtype_of<T>),
            ErrorKind::mismatch);
  }

  Inner inner_;
  Exec exec_;
  DType gradient_dtype_;
  DType compute_dtype_;
  std::vector<std::size_t> offsets_;
  Buffer<std::byte, pinned_host> staged_gradients_;
  Buffer<std::byte, pinned_host> staged_weights_;
  std::vector<Event> gradients_arrived_;  // layer l's gradient block is in staging memory
  std::vector<Event> weights_sent_;       // layer l's new compute copy is in device memory
  std::int64_t delay_after_;              // updates before the DPU starts (-1: never)
  std::uint64_t updates_ = 0;             // step() calls so far
  std::vector<char> writes_copy_;         // the pending update writes layer l's compute copy
  std::future<void> pending_;             // the update running on the host (DPU); joined first
  Event reduced_;                         // gradient_reduced(): the layer's delivery was queued
  Event early_copies_read_;               // after the last copy queued on the copy stream
  std::vector<char> sent_early_;          // layer l's block left during this step's backward
  std::size_t sent_in_backward_ = 0;      // of the last step
  DrainOnDestruction<Exec> drain_{exec_}; // queued copies finish before the staging goes
  // Last: destroyed first, once the copies queued on it ran, before the staging goes.
  typename Exec::side_stream copy_stream_{exec_, "offload.gradients"};
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
