#pragma once
// Stage 3's gathered layers. Each rank keeps its shard of every layer's compute copy; acquire(g)
// all-gathers layer g into a buffer that lives while it is acquired, and starts gathering the layer
// expected next (the next one forward, the previous one backward) so that its communication
// overlaps with the current layer's compute. Layers smaller than the persistence threshold stay
// gathered all the time and are refreshed once per step; gathered elements, prefetches included,
// never exceed the live bound except for what the caller holds itself.

#include "zero/comm/communicator.hpp"
#include "zero/core/any_buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace zero::detail {

template <Communicator Comm>
class GatherCache {
 public:
  struct Limits {
    std::size_t persistence_threshold = 0; // layers with fewer elements stay gathered
    std::size_t prefetch_elements = 0;     // gathered ahead at most
    std::size_t max_live_elements = 0;     // gathered at once at most (held layers excepted)
  };

  GatherCache(Comm& comm, const ShardLayout& layout, DType dtype, Limits limits)
      : comm_(comm), layout_(layout), dtype_(dtype), limits_(limits), slots_(layout.layer_count()) {
    static_assert(GatheringCommunicator<Comm>,
                  "zero: stage 3 gathers parameters: its communicator needs all_gather");
    for (std::size_t g = 0; g < slots_.size(); ++g)
      if (layout.layer(g).numel < limits.persistence_threshold) {
        slots_[g].persistent = AnyBuffer(dtype, layout.layer(g).flat_numel);
        persistent_bytes_ += slots_[g].persistent->size_bytes();
      }
  }

  // The compute copy of layer g, all of it; the caller must call release(g) when done.
  const AnyBuffer& acquire(const AnyBuffer& shard, std::size_t g) {
    Slot& s = slots_.at(g);
    if (s.persistent) return *s.persistent;
    if (s.holders == 0 && !s.buffer) gather(shard, g, /*prefetch=*/false);
    if (s.work.pending()) {
      const auto start = std::chrono::steady_clock::now();
      s.work.wait();
      exposed_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      prefetched_ -= layout_.layer(g).flat_numel;
    }
    ++s.holders;
    predict_and_prefetch(shard, g);
    return pool_[*s.buffer];
  }

  void release(std::size_t g) {
    Slot& s = slots_.at(g);
    if (s.persistent) return;
    require(s.holders > 0,
            "engine: layer " + std::to_string(g) + " released more often than acquired");
    if (--s.holders == 0) drop(g);
  }

  // Before the weights change: no layer may be held; prefetches are waited for and dropped, and
  // the direction guess starts over.
  void begin_update() {
    for (std::size_t g = 0; g < slots_.size(); ++g) {
      Slot& s = slots_[g];
      require(s.holders == 0, "engine: step() while layer " + std::to_string(g) +
                                  " is still acquired; release its handle first");
      if (s.buffer) {
        s.work.wait();
        prefetched_ -= layout_.layer(g).flat_numel;
        drop(g);
      }
    }
    last_ = std::nullopt;
  }

  // After the weights changed: refresh the persistent layers.
  void end_update(const AnyBuffer& shard) {
    std::vector<Work> works;
    for (std::size_t g = 0; g < slots_.size(); ++g)
      if (slots_[g].persistent) works.push_back(launch(shard, g, *slots_[g].persistent));
    wait_all(works);
  }

  // Elements gathered now (held and prefetched), and the most ever.
  std::size_t live_elements() const noexcept { return live_; }
  std::size_t peak_live_elements() const noexcept { return peak_live_; }
  std::size_t pool_bytes() const noexcept {
    std::size_t total = 0;
    for (const auto& b : pool_)
      total += b.size_bytes();
    return total;
  }
  std::size_t persistent_bytes() const noexcept { return persistent_bytes_; }
  bool persistent(std::size_t g) const { return slots_.at(g).persistent.has_value(); }
  // Time acquire() waited for a gather that was already in flight.
  double exposed_seconds() const noexcept { return exposed_seconds_; }

 private:
  struct Slot {
    std::optional<AnyBuffer> persistent;
    std::optional<std::size_t> buffer; // into pool_, while gathered or in flight
    Work work;                         // a prefetch in flight
    int holders = 0;
  };

  Work launch(const AnyBuffer& shard, std::size_t g, AnyBuffer& into) {
    const Range mine = layout_.block(g, comm_.rank());
    return visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      View<const T> block = shard.as<T>().subview(mine.begin, mine.size());
      View<T> all = into.as<T>().first(layout_.layer(g).flat_numel);
      return comm_.all_gather(block, all);
    });
  }

  void gather(const AnyBuffer& shard, std::size_t g, bool prefetch) {
    Slot& s = slots_[g];
    s.buffer = take_buffer();
    live_ += layout_.layer(g).flat_numel;
    peak_live_ = std::max(peak_live_, live_);
    s.work = launch(shard, g, pool_[*s.buffer]);
    if (prefetch)
      prefetched_ += layout_.layer(g).flat_numel;
    else
      s.work.wait();
  }

  void drop(std::size_t g) {
    Slot& s = slots_[g];
    free_.push_back(*s.buffer);
    s.buffer.reset();
    live_ -= layout_.layer(g).flat_numel;
  }

  std::size_t take_buffer() {
    if (!free_.empty()) {
      const std::size_t b = free_.back();
      free_.pop_back();
      return b;
    }
    std::size_t largest = 0;
    for (std::size_t g = 0; g < layout_.layer_count(); ++g)
      largest = std::max(largest, layout_.layer(g).flat_numel);
    pool_.emplace_back(dtype_, largest);
    return pool_.size() - 1;
  }

  // Forward walks layers up, backward down; after the last layer forward comes backward's turn,
  // and nothing is gathered past layer 0 going down (the step changes the weights first).
  void predict_and_prefetch(const AnyBuffer& shard, std::size_t g) {
    if (!last_ || g > *last_)
      forward_ = true;
    else if (g < *last_)
      forward_ = false;
    last_ = g;
    const std::size_t layers = slots_.size();
    std::optional<std::size_t> next;
    if (forward_) {
      if (g + 1 < layers)
        next = g + 1;
      else if (g > 0)
        next = g - 1;
    } else if (g > 0) {
      next = g - 1;
    }
    if (!next) return;
    Slot& s = slots_[*next];
    const std::size_t size = layout_.layer(*next).flat_numel;
    if (s.persistent || s.buffer || s.holders > 0) return;
    if (prefetched_ + size > limits_.prefetch_elements || live_ + size > limits_.max_live_elements)
      return;
    gather(shard, *next, /*prefetch=*/true);
  }

  Comm& comm_;
  const ShardLayout& layout_;
  DType dtype_;
  Limits limits_;
  std::vector<Slot> slots_;
  // A deque: handed-out LayerParameters point at its elements, which must not move when it grows.
  std::deque<AnyBuffer> pool_;
  std::vector<std::size_t> free_;
  std::optional<std::size_t> last_;
  bool forward_ = true;
  std::size_t live_ = 0, peak_live_ = 0, prefetched_ = 0, persistent_bytes_ = 0;
  double exposed_seconds_ = 0;
};

} // namespace zero::detail
