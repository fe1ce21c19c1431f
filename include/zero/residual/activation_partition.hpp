#pragma once
// ActivationPartition: ZeRO-R's partitioned activations (Pa). Under tensor parallelism every rank
// of a group computes the same block inputs (the residual stream is replicated between the
// layers), so a checkpointed loop that keeps its inputs whole keeps T copies of each over the
// group. Given a partition, CheckpointedLayers keeps only this rank's 1/T of each kept input (the
// input cut into T slices of ceil(n / T) elements, the last one padded with zeros) and, in
// backward, all-gathers the whole input over the group before recomputing from it. The gather of
// a segment's input starts when the segment after it begins its recomputation and backward, so
// that it runs behind that work. What comes back is a copy of what forward had: Pa changes no
// number.
//
//   zero::ActivationPartitionOver partition(groups.tensor()); // any host GatheringCommunicator
//   options.partition = &partition;
//
// An interface, as KeptInputTier is: the driver calls it once per kept input, and a loop can then
// choose at run time (a flag, a config) without one instantiation per communicator.

#include "zero/comm/communicator.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"

#include <cstddef>
#include <type_traits>

namespace zero {

class ActivationPartition {
 public:
  virtual ~ActivationPartition() = default;

  // The ranks that share the activations, and this one's place among them.
  virtual std::size_t parts() const = 0;
  virtual std::size_t part() const = 0;
  // Starts gathering every rank's `slice` (all of one size) into `whole`, parts() slices in rank
  // order; both stay untouched until the returned handle is waited for.
  virtual Work all_gather(View<const float> slice, View<float> whole) = 0;

  // Each rank's share of an input of `elements`: whole elements, rounded up.
  std::size_t slice_elements(std::size_t elements) const {
    return (elements + parts() - 1) / parts();
  }
};

// The partition over a group of host ranks (the tensor-parallel group). Borrows the communicator.
template <GatheringCommunicator Comm>
requires std::is_same_v<typename Comm::memory_space, host>
class ActivationPartitionOver final : public ActivationPartition {
 public:
  explicit ActivationPartitionOver(Comm& group) : group_(group) {}

  std::size_t parts() const override { return static_cast<std::size_t>(group_.size()); }
  std::size_t part() const override { return static_cast<std::size_t>(group_.rank()); }
  Work all_gather(View<const float> slice, View<float> whole) override {
    return group_.all_gather(slice, whole);
  }

 private:
  Comm& group_;
};

} // namespace zero
