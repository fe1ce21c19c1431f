#pragma once
// The vocabulary of a shard layout: what a partitioner is given (ParameterSpec) and the pieces it
// cuts parameters into (Segment), with the small value types the layout's queries return.
//
// Coordinates, used throughout shard/:
// - element:      position in the logical tensor, the parameters concatenated in registration
// order;
// - shard offset: position in one rank's shard (its layers' blocks end to end, padding included);
// - flat offset:  position in a layer's flat buffer, which is what all-gathering the layer's blocks
//                 produces: rank 0's block, then rank 1's, ... (padding included).

#include "zero/core/dtype.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace zero {

// Under tensor parallelism, how the ranks' slices of a parameter make the whole tensor: side by
// side along dimension `dimension` of its shape, in `blocks` runs (each rank's slice holding its
// part of every block: 3 for attention's fused query|key|value cut per head, 1 otherwise), the
// whole tensor's extent there being `whole_extent` (0: the slices' total; less where the last
// slices hold padding, as a vocabulary padded to a multiple of the group size). What a
// checkpoint's consolidation joins the slices by (zero/tensor_parallel/slices.hpp, join_split).
struct TensorParallelSplit {
  std::size_t dimension = 0;
  std::size_t blocks = 1;
  std::size_t whole_extent = 0;
  friend bool operator==(const TensorParallelSplit&, const TensorParallelSplit&) = default;
};

// One parameter as the user registers it. `layer` is the unit gathered and reduced together
// (usually a layer of the model); layers are laid out in ascending id order, their parameters in
// registration order.
struct ParameterSpec {
  std::string name;
  std::size_t numel = 0;
  DType dtype = DType::float32;
  int layer = 0;
  // Its dimensions, for checkpoints and consolidated files; empty means one dimension of numel.
  std::vector<std::size_t> shape = {};
  // Under tensor parallelism (zero/tensor_parallel/groups.hpp): every rank of the tensor-parallel
  // group holds the whole parameter, not a slice of it (a LayerNorm's weight, a row-parallel
  // layer's bias), and its gradient is the same on all of them; the gradient norm counts it once.
  bool replicated_over_tensor_parallel = false;
  // Under tensor parallelism, for a parameter that is a slice: how the slices join (above), which
  // checkpoints record so that they consolidate into whole tensors.
  std::optional<TensorParallelSplit> tensor_parallel_split = std::nullopt;
  // With 8-bit moments (EngineOptions::moments), its layer keeps fp32 ones: an embedding, whose
  // rare rows' second moments are too small beside the frequent rows' to keep in 8 bits
  // (bitsandbytes keeps embeddings in 32 bits). Every rank must say the same.
  bool fp32_moments = false;
};

// A half-open interval [begin, end) of positions.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;

  constexpr std::size_t size() const noexcept { return end - begin; }
  constexpr bool empty() const noexcept { return begin == end; }
  constexpr bool contains(std::size_t i) const noexcept { return begin <= i && i < end; }
  friend constexpr bool operator==(const Range&, const Range&) = default;
};

// `length` elements of parameter `parameter`, starting at `parameter_offset` inside it, stored on
// `rank` at `shard_offset` inside that rank's shard.
struct Segment {
  std::size_t parameter = 0;
  int rank = 0;
  std::size_t parameter_offset = 0;
  std::size_t shard_offset = 0;
  std::size_t length = 0;

  friend constexpr bool operator==(const Segment&, const Segment&) = default;
};

// Where an element lives: its owner and its position in the owner's shard.
struct Location {
  int rank = 0;
  std::size_t shard_offset = 0;
  friend constexpr bool operator==(const Location&, const Location&) = default;
};

// Which parameter element a shard position holds.
struct ElementRef {
  std::size_t parameter = 0;
  std::size_t offset = 0;
  friend constexpr bool operator==(const ElementRef&, const ElementRef&) = default;
};

// A layer as laid out: its flat buffer is `flat_numel` elements, the blocks of all ranks end to
// end; `block_numel` is every rank's block when the layout has equal slices (the largest block
// otherwise). `flat_base` places the layer's buffer when all layers' buffers are laid end to end.
struct LayerInfo {
  int id = 0;
  DType dtype = DType::float32;
  std::size_t flat_base = 0;
  std::size_t flat_numel = 0;
  std::size_t block_numel = 0;
  std::size_t numel = 0; // parameter elements, padding excluded
};

} // namespace zero
