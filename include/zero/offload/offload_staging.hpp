#pragma once
// OffloadStaging<Exec, HostSpace>: ZeRO-Offload's way between device memory and the host's store
// (offload/offloaded_optimizer_store.hpp). It holds the pinned staging of the elements this rank
// updates, layer by layer: the reduced gradient on its way to the host and the new compute copy
// on its way back, each in its element type (allocated once, reported as buffers), an event per
// layer each way, and a copy stream of its own:
//   - send_early(l, block): layer l's reduced block is final; it leaves device-to-host on the copy
//     stream, after an event on the engine's stream (its delivery), while backward goes on;
//   - stage(grads): at the step, the blocks that did not leave early, on the engine's stream;
//   - arrived(l): the host waits for layer l's block;
//   - send(l, out, done, sent) and hand_on(done, sent): layer l's new compute copy host-to-device
//     on the engine's stream, done(l) once it ran, one layer behind, so that a copy overlaps the
//     next layer's update;
//   - end_step(): later work on the engine's stream is ordered after the early copies.
// The host waits on the events of its own copies only, never on the device.

#include "zero/core/buffer.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

template <SideStreams Exec, class HostSpace>
class OffloadStaging {
  using Event = typename Exec::event_type;

 public:
  // `blocks[l]`: the elements of layer l this rank updates. `zeroed_weights`: the compute copy's
  // staging starts at zero, as the device's copy does (split masters read it as the weights' high
  // parts before anything was sent).
  OffloadStaging(const std::vector<std::size_t>& blocks, DType gradient, DType compute,
                 bool zeroed_weights, Exec exec)
      : exec_(exec), gradient_dtype_(gradient), compute_dtype_(compute), offsets_(offsets(blocks)),
        gradients_(offsets_.back() * size_of(gradient), uninitialized),
        weights_(zeroed_weights ? Buffer<std::byte, pinned_host>(offsets_.back() * size_of(compute))
                                : Buffer<std::byte, pinned_host>(offsets_.back() * size_of(compute),
                                                                 uninitialized)),
        gradients_arrived_(blocks.size()), weights_sent_(blocks.size()),
        sent_early_(blocks.size(), 0) {}

  OffloadStaging(const OffloadStaging&) = delete;
  OffloadStaging& operator=(const OffloadStaging&) = delete;

  std::size_t layers() const noexcept { return offsets_.size() - 1; }
  std::size_t block_size(std::size_t l) const { return offsets_.at(l + 1) - offsets_[l]; }
  DType compute_dtype() const noexcept { return compute_dtype_; }
  std::size_t bytes() const noexcept { return gradients_.size() + weights_.size(); }
  // The copy stream the gradients leave on during backward.
  Exec copy_space() const noexcept { return copy_stream_.space(); }

  // Layer l's staged gradient block, and its staged compute copy, as elements of E.
  template <class E>
  View<E, HostSpace> gradients(std::size_t l) {
    return block<E>(gradients_, l);
  }
  template <class E>
  View<E, HostSpace> weights(std::size_t l) {
    return block<E>(weights_, l);
  }

  // --- down: the reduced gradients ------------------------------------------------------------
  // Layer l's reduced block `block` (what the step's grads(l) will give) is final: it leaves now,
  // on the copy stream, after the work queued on the engine's stream so far (its delivery).
  template <class G, class Memory>
  void send_early(std::size_t l, View<const G, Memory> block) {
    require_gradient_type<G>();
    const Exec copies = copy_stream_.space();
    record(exec_, reduced_);
    if (!detail::wait_dropped("offload.gradient_reduced")) wait(copies, reduced_);
    copy(copies, block, gradients<G>(l));
    record(copies, gradients_arrived_.at(l));
    record(copies, early_copies_read_);
    sent_early_[l] = 1;
  }
  // The blocks sent early changed on the device afterwards (averaged over replica groups): the
  // host waits for their copies (so that the change does not race with their reads), and stage()
  // sends them again.
  void forget_early() {
    for (std::size_t l = 0; l < sent_early_.size(); ++l)
      if (std::exchange(sent_early_[l], 0) != 0) gradients_arrived_[l].synchronize();
  }
  // At the step: every block that did not leave early is queued on the engine's stream, an event
  // after each; those that did are counted.
  template <class Grads>
  void stage(Grads& grads) {
    using G = std::remove_const_t<typename decltype(grads(std::size_t{}))::value_type>;
    sent_in_backward_ = 0;
    for (std::size_t l = 0; l < layers(); ++l) {
      if (sent_early_[l] != 0) {
        ++sent_in_backward_;
        continue;
      }
      copy(exec_, grads(l), gradients<G>(l));
      record(exec_, gradients_arrived_[l]);
    }
  }
  // The host waits for layer l's block to be in staging.
  void arrived(std::size_t l) {
    if (!detail::wait_dropped("offload.gradients_arrived")) gradients_arrived_.at(l).synchronize();
  }
  // ... before the speculative update's thread updates the layer.
  void speculated_arrived(std::size_t l) {
    if (!detail::wait_dropped("offload.speculated_gradient_arrived"))
      gradients_arrived_.at(l).synchronize();
  }
  // ... for every layer's (the delayed update reads them all, on a thread of its own).
  void all_arrived() {
    for (Event& arrival : gradients_arrived_)
      if (!detail::wait_dropped("offload.delayed_gradients_arrived")) arrival.synchronize();
  }

  // --- up: the new compute copy ----------------------------------------------------------------
  // Queues layer l's staged compute copy host-to-device into out(l) (of T), then hands on the
  // layer sent before it (`sent`: queued, not handed on yet), whose copy has run once its event
  // passed.
  template <class T, class Out, class Done>
  void send(std::size_t l, Out& out, Done& done, std::optional<std::size_t>& sent) {
    const auto target = out(l);
    if (!target.empty()) copy(exec_, View<const T, HostSpace>(weights<T>(l)), target);
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

  // After a step, applied or skipped: later work on the engine's stream (the next step's deliveries
  // into the reduced gradients) is ordered after the early copies that read them. No result
  // depends on it (a skipped step's staging is never read, and the next copies overwrite it in
  // stream order), so it is not a site of dropped waits: it keeps the two streams' accesses
  // ordered, which is what a race detector checks over the twin. Returns how many blocks left
  // early in the step that staged its gradients (0 in a skipped one).
  std::size_t end_step() {
    wait(exec_, early_copies_read_);
    std::fill(sent_early_.begin(), sent_early_.end(), 0);
    return std::exchange(sent_in_backward_, 0);
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
  void require_types() const {
    require(dtype_of<G> == gradient_dtype_ && dtype_of<T> == compute_dtype_,
            std::string("offloaded optimizer step: staging was sized for ") +
                to_string(gradient_dtype_) + " gradients and a " + to_string(compute_dtype_) +
                " compute copy, the step has " + to_string(dtype_of<G>) + " and " +
                to_string(dtype_of<T>),
            ErrorKind::mismatch);
  }

 private:
  // Where each layer's block starts among the elements this rank updates (the last entry: all).
  static std::vector<std::size_t> offsets(const std::vector<std::size_t>& blocks) {
    std::vector<std::size_t> at{0};
    for (std::size_t n : blocks)
      at.push_back(at.back() + n);
    return at;
  }
  template <class E>
  View<E, HostSpace> block(Buffer<std::byte, pinned_host>& bytes, std::size_t l) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the buffer was sized for E
    E* first = reinterpret_cast<E*>(bytes.data()) + offsets_[l];
    return {first, offsets_[l + 1] - offsets_[l]};
  }

  Exec exec_;
  DType gradient_dtype_;
  DType compute_dtype_;
  std::vector<std::size_t> offsets_;
  Buffer<std::byte, pinned_host> gradients_;
  Buffer<std::byte, pinned_host> weights_;
  std::vector<Event> gradients_arrived_;  // layer l's gradient block is in staging memory
  std::vector<Event> weights_sent_;       // layer l's new compute copy is in device memory
  Event reduced_;                         // send_early(): the layer's delivery was queued
  Event early_copies_read_;               // after the last copy queued on the copy stream
  std::vector<char> sent_early_;          // layer l's block left during this step's backward
  std::size_t sent_in_backward_ = 0;      // of this step, once stage() ran
  DrainOnDestruction<Exec> drain_{exec_}; // queued copies finish before the staging goes
  // Last: destroyed first, once the copies queued on it ran, before the staging goes.
  typename Exec::side_stream copy_stream_{exec_, "offload.gradients"};
};

} // namespace zero
