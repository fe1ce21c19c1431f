#pragma once
// SpeculativeUpdate<U>: ZeRO-Offload's speculative update (docs/zero-offload.md). A layer's CPU
// update starts as soon as its reduced gradient has arrived on the host, during backward, before
// the step knows the global norm and whether any rank overflowed: with the update the step would
// make if it is neither skipped nor clipped. Each layer's states are copied into a snapshot first,
// so that the update can be undone exactly (inverting Adam in floating point is not exact).
// step() then compares the update and the gradient multiplier it makes with the ones speculated,
// bit for bit: equal, the speculated layers stand and the others are updated now; different (a
// clipped step, a learning rate changed since) or skipped (an overflow), each speculated layer's
// states are restored from its snapshot and the step runs as without speculation. Either way the
// states are those of the step without speculation, bit for bit.
//
// This class keeps the bookkeeping: the worker thread that updates the layers handed to it in the
// order they land, the snapshot memory, and the count of rollbacks. It turns speculation off for
// good when the step updates again too often (4 of the last 16 speculative steps: clipped, or an
// update that changed since): each of those costs a second update. A skipped step (an overflow, a
// loss scale searching) costs no second update, and does not count. The store that owns it
// (offload/offloaded_optimizer_store.hpp) says how to update a layer and which buffers it changes.

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/stream_copy.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/optimizer.hpp"

#include <algorithm>
#include <bit>
#include <bitset>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace zero {

// An update whose constants can be compared bit for bit (the update types of Adam, AdamW and SGD):
// a speculative update made with one is the step made with the other only when they are equal.
template <class U>
concept ComparableUpdate = ElementwiseUpdate<U> && requires(const U& a, const U& b) {
  { a.same_bits(b) } -> std::same_as<bool>;
};

// Copies `from` into `to` on the host's threads (same size); `streaming`: with stores that bypass
// the cache (core/stream_copy.hpp), for a destination nobody reads soon (a snapshot), which then
// costs no read-for-ownership.
inline void copy_bytes_in_parallel(View<const std::byte> from, View<std::byte> to,
                                   bool streaming = false) {
  detail::parallel_ranges(from.size(), [&](std::size_t begin, std::size_t end, int) noexcept {
    if (end > begin)
      detail::copy_bytes(to.data() + begin, from.data() + begin, end - begin, streaming);
  });
}

template <ComparableUpdate U>
class SpeculativeUpdate {
 public:
  // Steps updated twice among the last `window` speculative steps that turn speculation off.
  static constexpr std::size_t window = 16;
  static constexpr std::size_t updated_twice_that_turn_it_off = 4;

  // update(l) updates layer l (its gradient has arrived: the caller waits for it there), after
  // its states were copied into the layer's snapshot. `states(l, f)` calls f(View<std::byte>) on
  // each buffer of layer l's states that the update changes, in a fixed order: what the snapshot
  // holds, written with stores that bypass the cache (it is read only to undo).
  template <class States>
  SpeculativeUpdate(std::size_t layers, States states)
      : save_([states](std::size_t l, View<std::byte> snapshot) {
          each_at(states, l, [&](View<std::byte> block, std::size_t at) {
            copy_bytes_in_parallel(View<const std::byte>(block.data(), block.size()),
                                   snapshot.subview(at, block.size()), /*streaming=*/true);
          });
        }),
        restore_([states](std::size_t l, View<const std::byte> snapshot) {
          each_at(states, l, [&](View<std::byte> block, std::size_t at) {
            copy_bytes_in_parallel(snapshot.subview(at, block.size()), block);
          });
        }),
        offsets_{0}, updated_(layers, 0) {
    for (std::size_t l = 0; l < layers; ++l) {
      std::size_t bytes = 0;
      states(l, [&](View<std::byte> block) { bytes += block.size(); });
      offsets_.push_back(offsets_.back() + bytes);
    }
    snapshots_ = Buffer<std::byte, host>(offsets_.back(), uninitialized);
  }
  SpeculativeUpdate(const SpeculativeUpdate&) = delete;
  SpeculativeUpdate& operator=(const SpeculativeUpdate&) = delete;
  // Joins a worker still running, leaving the layers it has not begun (the owner is going).
  ~SpeculativeUpdate() {
    if (!worker_.joinable()) return;
    {
      const std::lock_guard lock(mutex_);
      queue_.clear();
      closed_ = true;
    }
    changed_.notify_one();
    worker_.join();
  }

  bool on() const noexcept { return !report_.off; }
  // Whether this step's speculation runs (begin() was called, finish() not yet).
  bool active() const noexcept { return worker_.joinable(); }
  std::size_t snapshot_bytes() const noexcept { return snapshots_.size(); }

  // Starts this step's speculation with the update and the gradient multiplier a step that is
  // neither skipped nor clipped would take; `update_layer(l, update, multiplier)` runs on a thread
  // of its own for each layer handed to landed(). One still active (a step that failed before
  // its end) is undone first.
  void begin(const U& update, float grad_multiplier,
             std::function<void(std::size_t, const U&, float)> update_layer) {
    cancel();
    update_ = update;
    multiplier_ = grad_multiplier;
    update_layer_ = std::move(update_layer);
    std::fill(updated_.begin(), updated_.end(), 0);
    queue_.clear();
    closed_ = false;
    failure_ = nullptr;
    end_step();
    worker_ = std::thread([this] { run(); });
  }
  // Layer l's gradient is on its way to the host: update it once it has arrived.
  void landed(std::size_t l) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(l);
    }
    changed_.notify_one();
  }

  // Waits for the updates of every layer handed over (rethrowing the first failure) and ends this
  // step's speculation. Then either keep() (the step's update and multiplier are the speculated
  // ones: matches()) or roll_back().
  void finish() {
    if (!active()) return;
    close();
    worker_.join();
    if (failure_) {
      restore_all(); // what ran is undone: the states stay as before the step
      std::rethrow_exception(std::exchange(failure_, nullptr));
    }
  }
  bool matches(const U& update, float grad_multiplier) const {
    return update_ && update_->same_bits(update) &&
           std::bit_cast<std::uint32_t>(multiplier_) ==
               std::bit_cast<std::uint32_t>(grad_multiplier);
  }
  // Whether layer l was updated speculatively (after finish()).
  bool updated(std::size_t l) const { return updated_.at(l) != 0; }

  // The speculated updates stand.
  void keep() { record(false); }
  // Every speculatively updated layer gets its states back from its snapshot: the step was
  // skipped (`updates_again` false) or updates again with other constants (true: it counts
  // towards turning speculation off).
  void roll_back(bool updates_again) {
    restore_all();
    report_.rolled_back = true;
    record(updates_again);
  }
  // Undone without counting (the states are read or written between steps; the plan changed the
  // gradients after they landed; a step failed before its end).
  void cancel() {
    if (!active()) return;
    close();
    worker_.join();
    failure_ = nullptr; // what failed is undone with the rest
    restore_all();
    report_.layers = 0;
  }
  // Off for good, saying why.
  void turn_off(std::string why) {
    cancel();
    if (on()) report_.why_off = std::move(why);
    report_.off = true;
  }

  // This step's: layers updated speculatively, rolled back or not, and whether it is off.
  const SpeculationReport& report() const noexcept { return report_; }
  // The step ended (its report read): the next one starts with nothing speculated.
  void end_step() noexcept {
    report_.layers = 0;
    report_.rolled_back = false;
  }

 private:
  void restore_all() {
    for (std::size_t l = 0; l < updated_.size(); ++l)
      if (std::exchange(updated_[l], 0) != 0) restore_(l, snapshot(l));
  }

  View<std::byte> snapshot(std::size_t l) {
    return {snapshots_.data() + offsets_[l], offsets_[l + 1] - offsets_[l]};
  }

  void close() {
    {
      const std::lock_guard lock(mutex_);
      closed_ = true;
    }
    changed_.notify_one();
  }

  // The worker: each landed layer saved, then updated, until closed and drained. After a failure
  // it updates nothing more.
  void run() noexcept {
    for (;;) {
      std::size_t l = 0;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        l = queue_.front();
        queue_.pop_front();
      }
      if (failure_ || l >= updated_.size() || updated_[l] != 0) continue;
      try {
        save_(l, snapshot(l));
        updated_[l] = 1; // saved: from here a rollback restores it
        update_layer_(l, *update_, multiplier_);
        ++report_.layers;
      } catch (...) {
        failure_ = std::current_exception();
      }
    }
  }

  // One more speculative step that was updated again (`twice`) or not.
  void record(bool twice) {
    recent_ = (recent_ << 1) | std::bitset<window>(twice ? 1 : 0);
    if (recent_.count() >= updated_twice_that_turn_it_off && on()) {
      report_.why_off = std::to_string(recent_.count()) + " of the last " + std::to_string(window) +
                        " speculative steps were updated twice (clipped, or their update changed "
                        "after backward began)";
      report_.off = true;
    }
  }

  // f(block, where in the snapshot) over layer l's state buffers.
  template <class States, class F>
  static void each_at(const States& states, std::size_t l, F&& f) {
    std::size_t at = 0;
    states(l, [&](View<std::byte> block) {
      f(block, at);
      at += block.size();
    });
  }

  std::function<void(std::size_t, View<std::byte>)> save_;
  std::function<void(std::size_t, View<const std::byte>)> restore_;
  std::vector<std::size_t> offsets_; // layer l's snapshot: [offsets_[l], offsets_[l + 1])
  Buffer<std::byte, host> snapshots_;
  std::vector<char> updated_; // saved and updated this step (the worker's until joined)
  std::optional<U> update_;
  float multiplier_ = 0.0f;
  std::function<void(std::size_t, const U&, float)> update_layer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::size_t> queue_;
  bool closed_ = false;
  std::exception_ptr failure_; // the worker's, read after the join
  std::bitset<window> recent_; // the last speculative steps: 1 updated twice
  SpeculationReport report_;
  std::thread worker_;
};

} // namespace zero
