#pragma once
// FlatContiguous: the layout of DeepSpeed's stage 1/2 and Megatron's distributed optimizer. Each
// layer's parameters are concatenated into one flat buffer, padded to a multiple of
// alignment * world_size elements and cut into equal slices, one per rank; a parameter may
// straddle two or more ranks. Every rank's slice (and so every layer's block in every shard)
// starts at a multiple of `alignment` elements.

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

struct FlatContiguous {
  static constexpr bool equal_slices = true;
  // In elements. 16 puts every fp32 slice on a 64-byte boundary, so SIMD optimizer loops over a
  // shard start on a full vector.
  std::size_t alignment = 16;

  std::string describe() const {
    return "flat_contiguous(alignment=" + std::to_string(alignment) + ")";
  }

  ShardLayout partition(std::span<const ParameterSpec> params, int world_size) const {
    require(alignment >= 1, "flat_contiguous: alignment must be at least 1 element, got 0");
    LayoutBuilder b(params, world_size, {.policy = describe(), .equal_slices = true});
    const auto ranks = static_cast<std::size_t>(world_size);
    for (std::size_t g = 0; g < b.layer_count(); ++g) {
      b.begin_layer(g);
      const std::size_t quantum = alignment * ranks;
      const std::size_t padded = (b.layer(g).numel + quantum - 1) / quantum * quantum;
      const std::size_t slice = padded / ranks;
      std::size_t flat = 0; // where the next parameter starts in the layer's flat buffer
      for (std::size_t p : b.layer_parameters(g)) {
        for (std::size_t done = 0; done < b.parameter(p).numel;) {
          const std::size_t rank = flat / slice;
          const std::size_t length = std::min(b.parameter(p).numel - done, slice - flat % slice);
          b.place(p, static_cast<int>(rank), done, length);
          done += length;
          flat += length;
        }
      }
      for (int r = 0; r < world_size; ++r)
        b.pad_block_to(r, slice);
    }
    return std::move(b).finish();
  }
};

} // namespace zero
