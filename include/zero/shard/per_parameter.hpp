#pragma once
// PerParameter: the layout of DeepSpeed's stage 3 and of FSDP's per-parameter sharding. Every
// parameter is cut into world_size equal chunks of ceil(numel / world_size) elements (rounded up
// to `alignment`); rank r holds chunk r, and the tail of the last chunks is zero padding. A rank's
// block of a layer is its chunks of the layer's parameters, in registration order, so all blocks
// of a layer are equal and a layer still moves in one collective. A parameter's chunks are apart
// in the layer's flat buffer (one in each rank's part): all-gathering one parameter alone into
// chunk * world_size elements gives it whole, followed by its padding.

#include "zero/core/error.hpp"
#include "zero/shard/layout_builder.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace zero {

struct PerParameter {
  static constexpr bool equal_slices = true;
  std::size_t alignment = 1; // in elements, for every chunk

  std::string describe() const {
    return "per_parameter(alignment=" + std::to_string(alignment) + ")";
  }

  // The chunk of a parameter of `numel` elements on each of `world_size` ranks.
  std::size_t chunk(std::size_t numel, int world_size) const noexcept {
    const auto ranks = static_cast<std::size_t>(world_size);
    const std::size_t even = (numel + ranks - 1) / ranks;
    return (even + alignment - 1) / alignment * alignment;
  }

  ShardLayout partition(std::span<const ParameterSpec> params, int world_size) const {
    require(alignment >= 1, "per_parameter: alignment must be at least 1 element, got 0");
    LayoutBuilder b(params, world_size, {.policy = describe(), .equal_slices = true});
    for (std::size_t g = 0; g < b.layer_count(); ++g) {
      b.begin_layer(g);
      for (std::size_t p : b.layer_parameters(g)) {
        const std::size_t numel = b.parameter(p).numel;
        const std::size_t c = chunk(numel, world_size);
        for (int r = 0; r < world_size; ++r) {
          const std::size_t begin = std::min(numel, static_cast<std::size_t>(r) * c);
          const std::size_t length = std::min(c, numel - begin);
          b.place(p, r, begin, length);
          b.pad(r, c - length);
        }
      }
    }
    return std::move(b).finish();
  }
};

} // namespace zero
