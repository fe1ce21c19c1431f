#pragma once
// ModelLayout: the model as the engine lays it out, shared read-only by its stores. The sharded
// layout places every layer's elements on the ranks of the shard group (the plan's partitioner);
// the replica layout is how a rank keeps a model state it does not shard (every layer's parameters
// in order, at the sharded layout's flat_base); the images map each layer's flat buffer to its
// parameters in order.

#include "zero/core/error.hpp"
#include "zero/shard/layer_images.hpp"
#include "zero/shard/replica_layout.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace zero {

struct ModelLayout {
  ModelLayout(ShardLayout layout, int shard_rank, int rank_in_world)
      : sharded(std::make_shared<const ShardLayout>(std::move(layout))),
        replica(std::make_shared<const ShardLayout>(replica_layout(*sharded))), images(*sharded),
        rank(shard_rank), world_rank(rank_in_world) {}

  std::size_t layers() const noexcept { return sharded->layer_count(); }
  // Refuses a layer index the model does not have.
  void check_layer(std::size_t l) const {
    require(l < layers(), "engine: no layer " + std::to_string(l) + " (the model has " +
                              std::to_string(layers()) + ")");
  }
  // This rank's block of layer l, in the layer's flat buffer.
  Range my_flat_range(std::size_t l) const { return sharded->flat_range(l, rank); }
  std::size_t my_block_size(std::size_t l) const { return sharded->block(l, rank).size(); }

  // Positions `part` of this rank's block of layer l, taken from the layer's parameters in order
  // (`ordered`): what a sharded store keeps of a layer it is given whole. Padding becomes zero.
  template <class From, class To>
  void pack_my_block(std::size_t l, const From* ordered, To* block, Range part) const {
    const Range mine = my_flat_range(l);
    images.pack(l, ordered, Range{mine.begin + part.begin, mine.begin + part.end}, block);
  }
  template <class From, class To>
  void pack_my_block(std::size_t l, const From* ordered, To* block) const {
    pack_my_block(l, ordered, block, Range{0, my_block_size(l)});
  }

  std::shared_ptr<const ShardLayout> sharded;
  std::shared_ptr<const ShardLayout> replica;
  LayerImages images;
  int rank;       // in the shard group
  int world_rank; // names this rank's swap files
};

} // namespace zero
