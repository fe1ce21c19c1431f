#pragma once
// What an engine reports: the model-state memory each rank holds, by kind and by tier (the
// paper's formula is estimate/memory.hpp), and what one step did and communicated.

#include "zero/comm/counting_communicator.hpp"
#include "zero/reduce/bucketed_reducer.hpp"

#include <cstddef>
#include <cstdint>

namespace zero {

// Bytes this rank holds in memory, by kind. `buffers` are the constant-size working buffers
// (reduction buckets, gradient scratch, stage 3's gathered layers, the NVMe tier's bounce
// buffers), which do not grow with the model's depth. States the placement keeps on the NVMe tier
// take no memory but their share of the buffers; their swap files are counted apart.
struct MemoryReport {
  std::size_t parameters = 0;       // compute copy (float, half or bfloat16)
  std::size_t gradients = 0;        // full or sharded, accumulation buffers included
  std::size_t master_weights = 0;   // fp32
  std::size_t optimizer_states = 0; // fp32 moments
  std::size_t buffers = 0;
  std::size_t parameters_on_nvme = 0; // stage 3's shard, in swap files
  std::size_t optimizer_on_nvme = 0;  // fp32 master weights and moments, in swap files
  // Where each kind lives: "host", "pinned_host" or "nvme".
  const char* parameters_tier = "host";
  const char* gradients_tier = "host";
  const char* optimizer_tier = "host";

  std::size_t model_states() const noexcept {
    return parameters + gradients + master_weights + optimizer_states;
  }
  std::size_t total() const noexcept { return model_states() + buffers; }
  std::size_t on_nvme() const noexcept { return parameters_on_nvme + optimizer_on_nvme; }
};

// Where step() spent its time on this rank.
struct StepTimes {
  double reduction_wait = 0; // waiting for the gradient buckets backward did not hide
  double norm = 0;           // the global norm: this rank's remaining sums and one all-reduce
  double update = 0;         // the optimizer's fused passes (and, on NVMe, their I/O)
  double total = 0;          // all of step()
  // What step() costs once the gradients are reduced.
  double after_reduction() const noexcept { return total - reduction_wait; }
};

struct StepResult {
  bool applied = false;    // false: an overflow on some rank skipped the step on every rank
  double loss_scale = 1.0; // the scale the gradients carried
  // Global L2 norm of the unscaled, averaged gradients (NaN or infinite on overflow).
  double grad_norm = 0.0;
  double clip_coefficient = 1.0;
  ReducerStats reduction;            // the gradient buckets of the last micro-step
  CommStats communication;           // every collective of this step, forward and backward included
  double gather_exposed_seconds = 0; // stage 3: time acquire() waited for gathers this step
  StepTimes seconds;                 // this rank's step()
};

} // namespace zero
