#pragma once
// KeptInputTier: where a checkpointed loop keeps its segments' inputs between forward and
// backward when memory should not hold them. DeepSpeed's cpu_checkpointing moves them off the GPU
// to host memory; in the host world the tier below memory is the NVMe tier
// (residual/kept_inputs_on_nvme.hpp). Transfers run in the background: keep() returns once the
// input is copied out, and backward asks for each input ahead of need (prefetch), so that reading
// it back overlaps the segment before it.
//
// An interface rather than a template parameter: the driver calls it a few times per step, and a
// loop can then choose its tier at run time (a flag, a config) without one instantiation per tier.

#include "zero/core/view.hpp"

#include <cstddef>

namespace zero {

class KeptInputTier {
 public:
  virtual ~KeptInputTier() = default;

  // Room for inputs 0 .. count - 1 of `elements` floats each; called at every forward.
  virtual void reserve(std::size_t count, std::size_t elements) = 0;
  // Starts storing input i; `input` may change once keep() returns.
  virtual void keep(std::size_t i, View<const float> input) = 0;
  // Starts reading input i back: restore(i) comes soon.
  virtual void prefetch(std::size_t i) = 0;
  // Input i into `into`, waiting for its transfer (started here if no prefetch did).
  virtual void restore(std::size_t i, View<float> into) = 0;
  // Every transfer in flight completes (synchronize_checkpoint_boundary).
  virtual void synchronize() = 0;
  // Host memory the tier holds for its transfers, and the bytes it moved so far.
  virtual std::size_t buffer_bytes() const = 0;
  virtual std::size_t bytes_written() const = 0;
  virtual std::size_t bytes_read() const = 0;
};

} // namespace zero
