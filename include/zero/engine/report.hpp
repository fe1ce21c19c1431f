#pragma once
// What an engine reports: the model-state memory each rank holds, by kind and by tier (the
// paper's formula is estimate/memory.hpp), and what one step did and communicated.

#include "zero/comm/counting_communicator.hpp"
#include "zero/gather/acquisition_order.hpp"
#include "zero/nvme/io_stats.hpp"
#include "zero/reduce/bucketed_reducer.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zero {

// The bytes of one kind of model state on this rank, by where they are.
struct StateBytes {
  std::size_t memory = 0; // host (or pinned host) memory
  std::size_t nvme = 0;   // swap files on the NVMe tier
  std::size_t total() const noexcept { return memory + nvme; }
};

// What this rank holds, by kind of model state and by tier. `buffers` are the constant-size
// working buffers in memory (reduction buckets, gradient scratch, stage 3's gathered layers, the
// NVMe tier's bounce buffers), which do not grow with the model's depth. A state on NVMe takes no
// memory but its share of the buffers.
struct MemoryReport {
  StateBytes parameters;       // compute copy (float, half or bfloat16)
  StateBytes gradients;        // full or sharded, accumulation buffers included
  StateBytes master_weights;   // fp32
  StateBytes optimizer_states; // fp32 moments
  std::size_t buffers = 0;
  // ZeRO-Offload's CPU/GPU split: the master weights and moments of the device's share, in device
  // memory (the host keeps room for all of them, counted above).
  std::size_t optimizer_on_device = 0;
  // Where each kind lives, as the placement says: "host", "pinned_host" or "nvme".
  const char* parameters_tier = "host";
  const char* gradients_tier = "host";
  const char* optimizer_tier = "host"; // master weights and moments

  // All model states, wherever they are: what the ZeRO paper's formula counts.
  std::size_t model_states() const noexcept {
    return parameters.total() + gradients.total() + master_weights.total() +
           optimizer_states.total();
  }
  std::size_t in_memory() const noexcept {
    return parameters.memory + gradients.memory + master_weights.memory + optimizer_states.memory +
           buffers + optimizer_on_device;
  }
  std::size_t on_nvme() const noexcept {
    return parameters.nvme + gradients.nvme + master_weights.nvme + optimizer_states.nvme;
  }
  std::size_t total() const noexcept { return model_states() + buffers + optimizer_on_device; }
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

// What ZeRO-Offload's speculative update did in a step (docs/zero-offload.md).
struct SpeculationReport {
  std::size_t layers = 0;   // layers updated speculatively (kept, or undone when rolled_back)
  bool rolled_back = false; // the step was skipped or clipped: the speculative updates undone
  bool off = false;         // asked for, and off: it turned itself off or the plan refused it
  std::string why_off;      // why, once off
};

// What ZeRO-Offload's CPU/GPU split did in a step (EngineOptions::offload_ratio below 1): both
// sides timed from the start of the update; zeros without the split and in a skipped step.
struct SplitReport {
  double host_share = 0;      // of the elements this rank updates, the share the host updated
  double host_seconds = 0;    // until the host's last layer was updated and sent back
  double device_seconds = 0;  // until the device's last kernel of the update had run
  double suggested_ratio = 0; // the share at which both sides would have ended together
};

// What ZeRO-Offload's store did in a step.
struct OffloadStepReport {
  // The layers whose reduced gradient left for the host during backward, before step() (the others
  // left in it); zero in a skipped step.
  std::size_t gradients_in_backward = 0;
  SpeculationReport speculation;
  SplitReport split;
};

struct StepResult {
  bool applied = false;    // false: an overflow on some rank skipped the step on every rank
  double loss_scale = 1.0; // the scale the gradients carried
  // Global L2 norm of the unscaled, averaged gradients (NaN or infinite on overflow).
  double grad_norm = 0.0;
  double clip_coefficient = 1.0;
  ReducerStats reduction;  // the gradient buckets of the last micro-step
  CommStats communication; // every collective of this step, forward and backward included
  // The part of `communication` within the hpZ groups (EngineOptions::hpz_partition_size).
  CommStats within_hpz_groups;
  // Time acquire() waited for parameters to be gathered since the last step (stage 3's gathers;
  // stages 1/2: the all-gathers the last step launched).
  double gather_exposed_seconds = 0;
  // How stage 3's gathers since the last step came about: prefetched in the foreseen order, or
  // started when acquire() asked (zero for stages 0-2, which keep every layer).
  GatherCounts gathers;
  StepTimes seconds; // this rank's step()
  // What the NVMe tier moved for this rank since the last step (the step's sub-groups, and stage
  // 3's parameter blocks read for forward and backward); zero without states on NVMe.
  IoStats nvme;
  OffloadStepReport offload; // ZeRO-Offload's store; zeros for any other placement
};

// The running totals a step's report subtracts: what the groups and the stores had counted when
// the last step ended (or the weights were set or loaded, which no step's figures include).
struct StepBaseline {
  CommStats communication, within_hpz_groups;
  double gather_exposed_seconds = 0;
  GatherCounts gathers;
  IoStats nvme;

  // Reports `now` minus this baseline in `result`; `now` becomes the baseline.
  void advance(StepResult& result, const StepBaseline& now) {
    result.communication = now.communication - communication;
    result.within_hpz_groups = now.within_hpz_groups - within_hpz_groups;
    result.gather_exposed_seconds = now.gather_exposed_seconds - gather_exposed_seconds;
    result.gathers = now.gathers - gathers;
    result.nvme = now.nvme - nvme;
    *this = now;
  }
};

// Seconds since the last lap, and since the start.
struct Stopwatch {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now(), last = start;
  double lap() {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    return seconds;
  }
  double total() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
};

} // namespace zero
