#pragma once
// Megatron-style tensor parallelism composed with ZeRO (Shoeybi et al., "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", 2019, section 3): the world of
// N_d x T ranks is cut into tensor-parallel groups of T consecutive ranks, each holding 1/T of
// every large weight, and N_d data-parallel replicas over which ZeRO shards each rank's model
// states. The memory model of memory.hpp then applies to the rank's parameters,
//   Ψ_rank = Ψ_split / T + Ψ_replicated,
// over N_d. For a GPT-2 transformer (biases, a head tied to the token embedding):
//   per layer   12 H² + 13 H: q|k|v 3H² + 3H and fc 4H² + 4H (column-parallel, split), proj H² and
//               fc_proj 4H² (row-parallel, split), their biases 2H and two LayerNorms 4H
//               (replicated)
//   embeddings  V H tokens (split by rows, V padded to a multiple of T), S H positions (replicated)
//   final LayerNorm 2H (replicated)
// Communication within a group, per rank and step: two all-reduces of B x S x H activations per
// layer in the forward pass and two in the backward (section 3), two more per recomputed layer,
// one for the embedding's lookup and one for the head's input gradient, and the vocabulary-
// parallel cross-entropy's three all-reduces of B x S values (the maximum logit, the sum of the
// exponentials, the target's logit). A ring all-reduce of b bytes puts 2 (T - 1) / T x b bytes on
// each rank's wire (nccl-tests' bus bandwidth).

#include "zero/core/error.hpp"

#include <cstdint>
#include <string>

namespace zero::estimate {

struct TransformerShape {
  std::int64_t layers = 0;      // L
  std::int64_t hidden = 0;      // H
  std::int64_t heads = 0;       // A
  std::int64_t sequence = 0;    // S
  std::int64_t vocabulary = 0;  // V
  std::int64_t micro_batch = 0; // B
};

// A model's parameters as a tensor-parallel group holds them.
struct ParameterSplit {
  double split = 0;      // the parameters cut over the group, counted whole (padding included)
  double replicated = 0; // the parameters every rank of the group holds
  std::int64_t tensor_parallel = 1;
  std::int64_t padded_vocabulary = 0; // 0 when there is no vocabulary (a bare count)

  double per_rank() const noexcept {
    return split / static_cast<double>(tensor_parallel) + replicated;
  }
};

// A parameter count with nothing known of its shape: every parameter taken as split.
inline ParameterSplit all_split(double parameters, std::int64_t tensor_parallel) {
  require(tensor_parallel >= 1, "estimate: the tensor-parallel size must be at least 1, got " +
                                    std::to_string(tensor_parallel));
  return {parameters, 0, tensor_parallel, 0};
}

inline ParameterSplit transformer_parameters(const TransformerShape& shape,
                                             std::int64_t tensor_parallel) {
  require(tensor_parallel >= 1, "estimate: the tensor-parallel size must be at least 1, got " +
                                    std::to_string(tensor_parallel));
  const std::int64_t t = tensor_parallel;
  const double l = static_cast<double>(shape.layers);
  const double h = static_cast<double>(shape.hidden);
  const std::int64_t padded = (shape.vocabulary + t - 1) / t * t;
  return {l * (12 * h * h + 7 * h) + static_cast<double>(padded) * h,
          l * 6 * h + static_cast<double>(shape.sequence) * h + 2 * h, t, padded};
}

// Ψ of the unsplit model: L (12 H² + 13 H) + V H + S H + 2H.
inline double transformer_parameters(const TransformerShape& shape) {
  const ParameterSplit whole = transformer_parameters(shape, 1);
  return whole.split + whole.replicated;
}

struct TensorParallelCommunication {
  std::int64_t all_reduces = 0;
  double elements = 0;   // summed over the all-reduces
  double bytes = 0;      // elements x bytes per activation element
  double ring_bytes = 0; // sent (and received) per rank: 2 (T - 1) / T x bytes
};

// Per rank and step, one micro-batch; nothing for a group of one.
inline TensorParallelCommunication tensor_parallel_communication(const TransformerShape& shape,
                                                                 std::int64_t tensor_parallel,
                                                                 std::int64_t recomputed_layers,
                                                                 double activation_bytes) {
  require(recomputed_layers >= 0 && recomputed_layers <= shape.layers,
          "estimate: recomputed layers must be 0.." + std::to_string(shape.layers) + ", got " +
              std::to_string(recomputed_layers));
  if (tensor_parallel <= 1) return {};
  const double tokens =
      static_cast<double>(shape.micro_batch) * static_cast<double>(shape.sequence);
  const std::int64_t activations = 4 * shape.layers + 2 * recomputed_layers + 2;
  const double elements =
      static_cast<double>(activations) * tokens * static_cast<double>(shape.hidden) + 3 * tokens;
  const double bytes = elements * activation_bytes;
  const double t = static_cast<double>(tensor_parallel);
  return {activations + 3, elements, bytes, 2 * (t - 1) / t * bytes};
}

} // namespace zero::estimate
