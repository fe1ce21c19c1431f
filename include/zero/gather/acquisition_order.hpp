#pragma once
// AcquisitionOrder: which layer the caller will acquire next, so that stage 3 can gather it ahead
// of need. Plain training walks the layers up and then down, and the direction of travel is a good
// guess. Other loops are not that simple: activation checkpointing re-runs the forward of a segment
// inside backward (down, then up and down again over the segment), and a model whose output head
// is tied to its embedding comes back to layer 0 at the end of forward. So, as DeepSpeed's
// parameter coordinator does, the first step's acquisitions are recorded and later steps follow
// the record. A step that departs from it falls back to the direction of travel from there on, and
// its own order becomes the record for the next step.

#include <cstddef>
#include <optional>
#include <vector>

namespace zero {

// How the gathers that acquire() needed came about: already gathered or in flight because the
// order was foreseen, or started on demand (the caller waits for all of it).
struct GatherCounts {
  std::size_t prefetched = 0;
  std::size_t on_demand = 0;
  std::size_t order_changes = 0; // steps whose acquisition order differed from the step before
  GatherCounts operator-(const GatherCounts& o) const noexcept {
    return {prefetched - o.prefetched, on_demand - o.on_demand, order_changes - o.order_changes};
  }
};

class AcquisitionOrder {
 public:
  explicit AcquisitionOrder(std::size_t layers) : layers_(layers) {}

  // Layer l is being acquired.
  void observe(std::size_t l) {
    if (following_) {
      if (position_ < record_.size() && record_[position_] == l)
        ++position_;
      else
        following_ = false;
    }
    if (!last_ || l > *last_)
      upward_ = true;
    else if (l < *last_)
      upward_ = false;
    last_ = l;
    current_.push_back(l);
  }

  // The `ahead`-th layer expected after the one just observed (1: the next), among those `wanted`
  // accepts; nullopt when none is expected before the step ends.
  template <class Wanted>
  std::optional<std::size_t> expected(std::size_t ahead, Wanted wanted) const {
    if (!last_) return std::nullopt;
    if (following_) {
      for (std::size_t i = position_; i < record_.size(); ++i)
        if (wanted(record_[i]) && --ahead == 0) return record_[i];
      return std::nullopt;
    }
    // Forward walks layers up, backward down; after the last layer forward comes backward's turn,
    // and nothing is expected past layer 0 going down (the step changes the weights first).
    bool up = upward_;
    for (std::size_t at = *last_;;) {
      if (up && at + 1 < layers_) {
        ++at;
      } else if (at > 0) {
        up = false;
        --at;
      } else {
        return std::nullopt;
      }
      if (wanted(at) && --ahead == 0) return at;
    }
  }

  // Whether the record says layer l is acquired next (again, when it was just acquired).
  bool comes_next(std::size_t l) const noexcept {
    return following_ && position_ < record_.size() && record_[position_] == l;
  }

  // Whether the record acquires layer l again before acquisitions of `distance` elements (as
  // `elements(layer)` counts them) have passed: DeepSpeed's reuse distance, walked as its parameter
  // coordinator walks its trace.
  template <class Elements>
  bool reacquired_within(std::size_t l, std::size_t distance, Elements elements) const {
    if (!following_) return false;
    std::size_t passed = 0;
    for (std::size_t i = position_; i < record_.size() && passed < distance; ++i) {
      if (record_[i] == l) return true;
      passed += elements(record_[i]);
    }
    return false;
  }

  // The step ended (applied or skipped): the next one starts from the beginning of the record,
  // which is this step's order unless this step followed it to the end.
  void end_step() {
    if (!current_.empty()) {
      const bool repeated = following_ && position_ == record_.size();
      if (!repeated) {
        if (!record_.empty()) ++changes_;
        record_.swap(current_);
      }
      current_.clear();
    }
    following_ = !record_.empty();
    position_ = 0;
    last_ = std::nullopt;
  }

  // Whether the acquisitions so far followed the recorded order.
  bool following_record() const noexcept { return following_; }
  // Steps whose order differed from the step before (the first step's recording not counted).
  std::size_t order_changes() const noexcept { return changes_; }

 private:
  std::size_t layers_;
  std::vector<std::size_t> record_;  // the last complete step's acquisitions
  std::vector<std::size_t> current_; // this step's so far
  std::size_t position_ = 0;         // into record_: the next acquisition expected
  bool following_ = false;
  std::optional<std::size_t> last_;
  bool upward_ = true;
  std::size_t changes_ = 0;
};

} // namespace zero
