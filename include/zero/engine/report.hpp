#pragma once
// What an engine reports: the model-state memory each rank holds, by kind, next to the ZeRO
// paper's formula, and what one step did and communicated.

#include "zero/comm/counting_communicator.hpp"
#include "zero/reduce/bucketed_reducer.hpp"

#include <cstddef>
#include <cstdint>

namespace zero {

// Bytes this rank holds. `buffers` are the constant-size working buffers (reduction buckets,
// gradient scratch, stage 3's gathered layers), which do not grow with the model's depth.
struct MemoryReport {
  std::size_t parameters = 0;       // compute copy (float, half or bfloat16)
  std::size_t gradients = 0;        // full or sharded, accumulation buffers included
  std::size_t master_weights = 0;   // fp32
  std::size_t optimizer_states = 0; // fp32 moments
  std::size_t buffers = 0;

  std::size_t model_states() const noexcept {
    return parameters + gradients + master_weights + optimizer_states;
  }
  std::size_t total() const noexcept { return model_states() + buffers; }
};

// The ZeRO paper's model-state bytes per rank for Ψ parameters over N ranks: parameter and gradient
// bytes per element P (2 for fp16), K bytes of optimizer state per element (12 for mixed-precision
// Adam: fp32 master, momentum and variance):
//   stage 0: (2P + K)Ψ   stage 1: 2PΨ + KΨ/N   stage 2: PΨ + (P + K)Ψ/N   stage 3: (2P + K)Ψ/N
inline double paper_model_state_bytes(int stage, double psi, double ranks, double p_bytes,
                                      double k_bytes) {
  switch (stage) {
  case 0:
    return (2 * p_bytes + k_bytes) * psi;
  case 1:
    return 2 * p_bytes * psi + k_bytes * psi / ranks;
  case 2:
    return p_bytes * psi + (p_bytes + k_bytes) * psi / ranks;
  default:
    return (2 * p_bytes + k_bytes) * psi / ranks;
  }
}

struct StepResult {
  bool applied = false;    // false: an overflow on some rank skipped the step on every rank
  double loss_scale = 1.0; // the scale the gradients carried
  double grad_norm =
      0.0; // global L2 norm of the unscaled, averaged gradients (NaN/Inf on overflow)
  double clip_coefficient = 1.0;
  ReducerStats reduction;            // the gradient buckets of the last micro-step
  CommStats communication;           // every collective of this step, forward and backward included
  double gather_exposed_seconds = 0; // stage 3: time acquire() waited for gathers this step
};

} // namespace zero
