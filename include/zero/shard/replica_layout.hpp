#pragma once
// The layout of a whole copy of a sharded model, as one rank keeps it when a model state is not
// sharded (the compute copy of ZeRO stages 0-2, the full gradient of stages 0 and 1, every state of
// stage 0). It has one slice; layer l's block holds the layer's parameters in registration order,
// padded to the layer's image size in the sharded layout. So every layer starts at the same
// position as in the sharded layout (flat_base), and where the sharded layout keeps the
// parameters in order (FlatContiguous), a layer of the replica is exactly the image an all-gather
// of the sharded blocks produces, in place.

#include "zero/shard/layout_builder.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <string>
#include <utility>

namespace zero {

inline ShardLayout replica_layout(const ShardLayout& sharded) {
  LayoutBuilder b(sharded.parameters(), 1,
                  {.policy = "replica of " + std::string(sharded.policy()), .equal_slices = true});
  for (std::size_t l = 0; l < b.layer_count(); ++l) {
    b.begin_layer(l);
    for (std::size_t p : b.layer_parameters(l))
      b.place(p, 0, 0, b.parameter(p).numel);
    b.pad_block_to(0, sharded.layer(l).flat_numel);
  }
  return std::move(b).finish();
}

} // namespace zero
