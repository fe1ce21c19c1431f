#pragma once
// ModelLayout: the model as the engine lays it out, shared read-only by its stores. The sharded
// layout places every layer's elements on the ranks of the shard group (the plan's partitioner);
// the replica layout is how a rank keeps a model state it does not shard (every layer's parameters
// in order, at the sharded layout's flat_base); the images map each layer's flat buffer to its
// parameters in order. Under tensor parallelism, a tensor rank other than 0 also lists the parts
// of its blocks that count in the gradient norm (tensor rank 0 counts the replicated parameters).

#include "zero/core/error.hpp"
#include "zero/shard/layer_images.hpp"
#include "zero/shard/replica_layout.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct ModelLayout {
  // `counts_replicated`: false on the tensor ranks other than 0, whose norms leave out the
  // parameters replicated over tensor parallelism.
  ModelLayout(ShardLayout layout, int shard_rank, int rank_in_world, bool counts_replicated = true)
      : sharded(std::make_shared<const ShardLayout>(std::move(layout))),
        replica(std::make_shared<const ShardLayout>(replica_layout(*sharded))), images(*sharded),
        rank(shard_rank), world_rank(rank_in_world) {
    if (!counts_replicated) norm_pieces_ = pieces_without_replicated();
  }

  std::size_t layers() const noexcept { return sharded->layer_count(); }
  // Refuses a layer index the model does not have.
  void check_layer(std::size_t l) const {
    require(l < layers(), "engine: no layer " + std::to_string(l) + " (the model has " +
                              std::to_string(layers()) + ")");
  }
  // This rank's block of layer l, in the layer's flat buffer.
  Range my_flat_range(std::size_t l) const { return sharded->flat_range(l, rank); }
  std::size_t my_block_size(std::size_t l) const { return sharded->block(l, rank).size(); }
  std::vector<std::size_t> my_block_sizes() const {
    std::vector<std::size_t> sizes;
    for (std::size_t l = 0; l < layers(); ++l)
      sizes.push_back(my_block_size(l));
    return sizes;
  }

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

  // The parts of this rank's block of layer l that count in the gradient norm, ascending and
  // relative to the block, or null when all of it does. Derived from the block's range of the
  // layer's image, which every stage shares: the norm is summed piece by piece alike in all.
  const std::vector<Range>* norm_pieces(std::size_t l) const {
    return l < norm_pieces_.size() && norm_pieces_[l] ? &*norm_pieces_[l] : nullptr;
  }

  std::shared_ptr<const ShardLayout> sharded;
  std::shared_ptr<const ShardLayout> replica;
  LayerImages images;
  int rank;       // in the shard group
  int world_rank; // names this rank's swap files

 private:
  // For each layer with replicated parameters in this rank's block, the rest of the block (padding
  // included: it is zero), cut where the replicated parameters' elements lie.
  std::vector<std::optional<std::vector<Range>>> pieces_without_replicated() const {
    std::vector<std::optional<std::vector<Range>>> pieces(layers());
    for (std::size_t l = 0; l < layers(); ++l) {
      std::vector<Range> replicated; // in the layer's parameters in order
      std::size_t at = 0;
      for (std::size_t p : sharded->layer_parameters(l)) {
        const ParameterSpec& spec = sharded->parameter(p);
        if (spec.replicated_over_tensor_parallel) replicated.push_back({at, at + spec.numel});
        at += spec.numel;
      }
      if (replicated.empty()) continue;
      const Range mine = my_flat_range(l);
      std::vector<Range> counted;
      std::size_t next = 0; // in the block: where the part not yet listed starts
      bool left_out = false;
      images.for_each_run(l, mine, [&](const ImageRun& run) {
        for (const Range& r : replicated) {
          const std::size_t begin = std::max(r.begin, run.ordered);
          const std::size_t end = std::min(r.end, run.ordered + run.length);
          if (begin >= end) continue;
          const std::size_t in_block = run.flat - mine.begin + (begin - run.ordered);
          if (in_block > next) counted.push_back({next, in_block});
          next = in_block + (end - begin);
          left_out = true;
        }
      });
      if (!left_out) continue;
      if (next < mine.size()) counted.push_back({next, mine.size()});
      pieces[l] = std::move(counted);
    }
    return pieces;
  }

  std::vector<std::optional<std::vector<Range>>> norm_pieces_;
};

} // namespace zero
