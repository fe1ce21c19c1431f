#pragma once
// Activation memory per rank of a GPT-2 transformer's blocks under tensor parallelism, with and
// without activation checkpointing and with ZeRO-R's partitioned activations (Pa). The ZeRO paper
// (section 3.2) gives activations only roughly; these figures are derived from the shapes that
// zero's GPT block keeps for its backward (examples/train_gpt/gpt.hpp, saved_layout), with
// R = B S rows, H the hidden width, 4H the MLP's, A heads and T the tensor-parallel size, per
// layer in elements:
//   replicated over the group  ln1's output R H and its mean and rstd 2R, the residual `mid` R H,
//                              ln2's output R H and its 2R: 3 R H + 4 R
//   split over the group       qkv 3 R H / T, the attention probabilities B (A / T) S², the heads'
//                              output R H / T, fc 4 R H / T, gelu 4 R H / T:
//                              (12 R H + B A S²) / T
//   the block's input          R H (what a checkpoint keeps), replicated
// Memory per rank, the elements times the bytes per activation element, for L layers and
// K = min(number_checkpoints, L) segments of ceil(L / K) layers at most (CheckpointPlan's cut):
//   none                       L (R H + saved): every layer keeps its input and what it saves
//   checkpointing              (K - 1) R H kept inputs (the last segment runs whole, its input is
//                              not kept) + ceil(L / K) (R H + saved), one segment's working memory
//   checkpointing + Pa         (K - 1) ceil(R H / T) kept slices + the same segment
//                              + 2 ceil(R H / T) T, the two whole buffers the gather fills in turn
//                              (none when K = 1: nothing is kept, nothing gathered)
//   Pa, slices on a tier       as Pa with no kept slices on the device; their bytes are held by the
//                              tier (NVMe for the host engine; DeepSpeed's cpu_checkpointing)
// Pa's communication per rank and step: K - 1 all-gathers of ceil(R H / T) T elements (the whole
// buffer, as nccl-tests counts an all-gather), each putting (T - 1) / T of its bytes on a rank's
// wire. The embeddings, the final LayerNorm, the head's logits and backward's gradient buffers are
// not counted.

#include "zero/core/error.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace zero::estimate {

// One block's activations as a rank of a tensor-parallel group keeps them, in elements.
struct BlockActivations {
  double input = 0;      // R H: the block's input, replicated
  double replicated = 0; // saved and replicated: 3 R H + 4 R
  double split = 0;      // saved and split: (12 R H + B A S²) / T

  double saved() const noexcept { return replicated + split; }
  // What a layer keeps when nothing is checkpointed: its input and what it saves.
  double layer() const noexcept { return input + saved(); }
};

namespace detail {
inline void check_activation_shape(const TransformerShape& shape, std::int64_t tensor_parallel) {
  const auto whole = [](std::int64_t n) { return std::to_string(n); };
  require(tensor_parallel >= 1,
          "estimate: the tensor-parallel size must be at least 1, got " + whole(tensor_parallel));
  require(shape.layers >= 1 && shape.hidden >= 1 && shape.heads >= 1 && shape.sequence >= 1 &&
              shape.micro_batch >= 1,
          "estimate: activations need a transformer's layers, hidden width, heads, sequence "
          "length and micro-batch, all at least 1");
  require(shape.heads % tensor_parallel == 0 && shape.hidden % tensor_parallel == 0,
          "estimate: " + whole(shape.heads) + " heads of width " + whole(shape.hidden) +
              " do not split over " + whole(tensor_parallel) + " tensor-parallel ranks");
}
} // namespace detail

inline BlockActivations block_activations(const TransformerShape& shape,
                                          std::int64_t tensor_parallel) {
  detail::check_activation_shape(shape, tensor_parallel);
  const double b = static_cast<double>(shape.micro_batch);
  const double s = static_cast<double>(shape.sequence);
  const double rows = b * s;
  const double h = static_cast<double>(shape.hidden);
  const double a = static_cast<double>(shape.heads);
  const double t = static_cast<double>(tensor_parallel);
  return {rows * h, 3 * rows * h + 4 * rows, (12 * rows * h + b * a * s * s) / t};
}

enum class ActivationScheme {
  none,                  // every layer's activations kept from forward to backward
  checkpointed,          // each segment's input kept whole
  partitioned,           // checkpointed, each kept input as this rank's 1/T slice (Pa)
  partitioned_off_device // Pa with the slices on another tier (NVMe, or pinned host memory)
};

inline const char* to_string(ActivationScheme scheme) {
  switch (scheme) {
  case ActivationScheme::none:
    return "none";
  case ActivationScheme::checkpointed:
    return "checkpointing";
  case ActivationScheme::partitioned:
    return "checkpointing + Pa";
  case ActivationScheme::partitioned_off_device:
    return "Pa, slices on another tier";
  }
  return "?";
}

struct ActivationQuery {
  TransformerShape shape;
  std::int64_t tensor_parallel = 1;
  ActivationScheme scheme = ActivationScheme::none;
  std::int64_t checkpoints = 1; // number_checkpoints K, at least 1, capped at L; unused by none
  double bytes_per_element = 2; // fp16/bf16 activations; 4 for fp32
};

// Elements per rank; the bytes are elements x bytes_per_element.
struct ActivationMemoryPerRank {
  std::int64_t segments = 1;       // K after the cap (1 without checkpointing)
  std::int64_t segment_layers = 0; // ceil(L / K): the longest segment
  double kept = 0;                 // kept block inputs (or slices) in device memory
  double segment = 0;              // one segment's working memory, ceil(L / K) (R H + saved)
  double gather_buffers = 0;       // Pa's two whole buffers, 2 ceil(R H / T) T
  double off_device = 0;           // kept slices on another tier
  double bytes_per_element = 2;

  double device_elements() const noexcept { return kept + segment + gather_buffers; }
  double device_bytes() const noexcept { return device_elements() * bytes_per_element; }
  double off_device_bytes() const noexcept { return off_device * bytes_per_element; }
};

// K = min(number_checkpoints, L), as CheckpointPlan caps it; 0 is refused (it means no
// checkpointing: ActivationScheme::none).
inline std::int64_t checkpoint_segments(std::int64_t layers, std::int64_t checkpoints) {
  require(checkpoints >= 1, "estimate: checkpointing needs at least 1 checkpoint, got " +
                                std::to_string(checkpoints) +
                                " (0 is no checkpointing: ActivationScheme::none)");
  return std::min(checkpoints, layers);
}

// The layers a checkpointed step runs forward twice: all but the last segment's, which is the
// shortest of CheckpointPlan's, floor(L / K) layers.
inline std::int64_t recomputed_layers(std::int64_t layers, std::int64_t checkpoints) {
  return layers - layers / checkpoint_segments(layers, checkpoints);
}

inline ActivationMemoryPerRank activation_memory(const ActivationQuery& query) {
  const BlockActivations block = block_activations(query.shape, query.tensor_parallel);
  const std::int64_t layers = query.shape.layers;
  const std::int64_t k =
      query.scheme == ActivationScheme::none ? 1 : checkpoint_segments(layers, query.checkpoints);
  const std::int64_t longest = (layers + k - 1) / k;
  const double t = static_cast<double>(query.tensor_parallel);
  const double slice = std::ceil(block.input / t);
  const double kept_inputs = static_cast<double>(k - 1);
  ActivationMemoryPerRank m;
  m.segments = k;
  m.segment_layers = longest;
  m.segment = static_cast<double>(longest) * block.layer();
  m.bytes_per_element = query.bytes_per_element;
  switch (query.scheme) {
  case ActivationScheme::none:
    break;
  case ActivationScheme::checkpointed:
    m.kept = kept_inputs * block.input;
    break;
  case ActivationScheme::partitioned:
    m.kept = kept_inputs * slice;
    m.gather_buffers = k > 1 ? 2 * slice * t : 0;
    break;
  case ActivationScheme::partitioned_off_device:
    m.off_device = kept_inputs * slice;
    m.gather_buffers = k > 1 ? 2 * slice * t : 0;
    break;
  }
  return m;
}

struct PartitionedActivationCommunication {
  std::int64_t all_gathers = 0; // K - 1
  double elements = 0;          // summed over the all-gathers, whole buffers
  double bytes = 0;             // elements x bytes per activation element
  double ring_bytes = 0;        // sent (and received) per rank: (T - 1) / T x bytes
};

// Per rank and step, one micro-batch; nothing for a group of one.
inline PartitionedActivationCommunication
partitioned_activation_communication(const TransformerShape& shape, std::int64_t tensor_parallel,
                                     std::int64_t checkpoints, double bytes_per_element) {
  const BlockActivations block = block_activations(shape, tensor_parallel);
  const std::int64_t k = checkpoint_segments(shape.layers, checkpoints);
  if (tensor_parallel <= 1) return {};
  const double t = static_cast<double>(tensor_parallel);
  const double elements = static_cast<double>(k - 1) * std::ceil(block.input / t) * t;
  const double bytes = elements * bytes_per_element;
  return {k - 1, elements, bytes, (t - 1) / t * bytes};
}

} // namespace zero::estimate
