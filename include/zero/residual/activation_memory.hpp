#pragma once
// ActivationMemory: where a checkpointed loop's activations live. Two lifetimes meet there: what
// lives for the whole step (the kept layer inputs, the gradient buffers of backward) and what lives
// for one segment (its layers' inputs and saved states, dropped when the segment's backward is
// done). Allocated one by one, the short-lived buffers leave holes between the long-lived ones, and
// a step's worth of memory can grow past what is ever live at once.
//
// With `contiguous` (DeepSpeed's contiguous_memory_optimization) both lifetimes come from one
// arena: each has a region filled from its start and emptied all at once, so nothing fragments.
// The first step allocates one by one and measures each region's peak; at its end the arena is
// allocated at exactly those peaks. A later step that needs more (a longer sequence, say) still
// gets its memory, one by one, and the arena grows to the new peak when that step ends.
//
// The memory is Memory's: host memory by default, a device's for a loop whose layers run on its
// stream. Then a buffer freed while queued work still reads it would be reused too early, so the
// caller waits for its stream before ending a segment or a step that frees any
// (frees_at_segment_end, frees_at_step_end); with the arena, only a step that needed more than the
// steps before it (the first, or one that makes the arena grow) frees any.

#include "zero/core/buffer.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zero {

// How long an activation buffer lives: until the step ends, or the segment.
enum class ActivationLifetime { step, segment };

template <class Memory = host>
class ActivationMemory {
 public:
  using Lifetime = ActivationLifetime;

  explicit ActivationMemory(bool contiguous) : contiguous_(contiguous) {}

  // `elements` floats that live until the end of the segment or the step. Uninitialized.
  View<float, Memory> take(Lifetime lifetime, std::size_t elements) {
    Region& r = region(lifetime);
    const std::size_t size = round_up(elements);
    r.used += size;
    r.peak = std::max(r.peak, r.used);
    live_ += size;
    peak_live_ = std::max(peak_live_, live_);
    if (contiguous_ && r.used <= r.arena.size())
      return r.arena.view().subview(r.used - size, elements);
    return r.one_by_one.emplace_back(elements, uninitialized).view();
  }

  // What the segment took is free again.
  void end_segment() { empty(region(Lifetime::segment)); }
  // Whether end_segment() or end_step() gives back a buffer (rather than only arena space): one
  // taken one by one, or at the step's end an arena that grows.
  bool frees_at_segment_end() const noexcept { return !segment_.one_by_one.empty(); }
  bool frees_at_step_end() const noexcept {
    for (const Region* r : {&step_, &segment_})
      if (!r->one_by_one.empty() || (contiguous_ && r->peak > r->arena.size())) return true;
    return false;
  }

  // What the step took is free again; the first step (or one that needed more) sizes the arena.
  void end_step() {
    end_segment();
    empty(step_);
    if (!contiguous_) return;
    for (Region* r : {&step_, &segment_})
      if (r->peak > r->arena.size()) {
        if (r->arena.size() > 0) ++growths_;
        r->arena = Buffer<float, Memory>(r->peak, uninitialized);
      }
  }

  // A step that did not finish (a layer threw): what it took is free, and the arena keeps its size.
  void abandon_step() noexcept {
    empty(segment_);
    empty(step_);
  }

  // Bytes the arena holds (0 without `contiguous`).
  std::size_t reserved_bytes() const noexcept {
    return (step_.arena.size() + segment_.arena.size()) * sizeof(float);
  }
  // The most bytes ever live at once, and live now.
  std::size_t peak_live_bytes() const noexcept { return peak_live_ * sizeof(float); }
  std::size_t live_bytes() const noexcept { return live_ * sizeof(float); }
  // Whether p points into the arena.
  bool in_arena(const float* p) const noexcept {
    for (const Region* r : {&step_, &segment_})
      if (r->arena.size() > 0 && p >= r->arena.data() && p < r->arena.data() + r->arena.size())
        return true;
    return false;
  }
  // Times a step needed more than the arena and it grew.
  std::size_t growths() const noexcept { return growths_; }
  bool contiguous() const noexcept { return contiguous_; }

 private:
  struct Region {
    Buffer<float, Memory> arena;
    std::vector<Buffer<float, Memory>> one_by_one;
    std::size_t used = 0, peak = 0;
  };

  // Whole cache lines, so that no two buffers share one.
  static std::size_t round_up(std::size_t elements) {
    constexpr std::size_t line = 64 / sizeof(float);
    return (elements + line - 1) / line * line;
  }
  Region& region(Lifetime lifetime) { return lifetime == Lifetime::step ? step_ : segment_; }
  void empty(Region& r) {
    live_ -= r.used;
    r.used = 0;
    r.one_by_one.clear();
  }

  bool contiguous_;
  Region step_, segment_;
  std::size_t live_ = 0, peak_live_ = 0, growths_ = 0;
};

} // namespace zero
