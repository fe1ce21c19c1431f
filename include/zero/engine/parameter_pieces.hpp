#pragma once
// ParameterPieces: where the pieces of each parameter lie in the blocks an optimizer store keeps,
// for optimizers whose step needs sums over whole parameters (LAMB's trust ratio,
// optim/trust_ratio_step.hpp). A piece is a run of one parameter on one rank of the sharded
// layout. A store that keeps its shard (stages 1-3) has the pieces of its own rank; a store that
// keeps everything (stage 0) has every rank's pieces, found in its replica, and sums each one as
// its owner would: with the same fixed order inside a piece and the same order of pieces and
// ranks, the sums, and so the weights, are the same bits at every stage.

#include "zero/engine/model_layout.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace zero {

struct ParameterPiece {
  std::size_t position = 0; // in the store's block of the layer
  std::size_t length = 0;
  std::size_t parameter = 0;
  int rank = 0; // the sharded layout's rank that owns the piece: the row its sums go into
};

class ParameterPieces {
 public:
  // `whole`: the store keeps every rank's blocks (a replica on the replica layout).
  ParameterPieces(const ModelLayout& model, bool whole) : by_layer_(model.layers()) {
    const ShardLayout& sharded = *model.sharded;
    const auto add = [&](int r) {
      for (const Segment& s : sharded.rank_segments(r)) {
        const std::size_t l = sharded.layer_of(s.parameter);
        const std::size_t position =
            whole ? model.replica->locate(s.parameter, s.parameter_offset).shard_offset -
                        model.replica->block(l, 0).begin
                  : s.shard_offset - sharded.block(l, r).begin;
        by_layer_[l].push_back({position, s.length, s.parameter, r});
      }
    };
    if (whole)
      for (int r = 0; r < sharded.world_size(); ++r)
        add(r);
    else
      add(model.rank);
  }

  // Layer l's pieces in the order their sums are added (rank, then the owner's shard order).
  std::span<const ParameterPiece> layer(std::size_t l) const { return by_layer_.at(l); }

  // Layer l's pieces ascending in the block (for the pass that writes it, and its gaps).
  std::vector<ParameterPiece> by_position(std::size_t l) const {
    std::vector<ParameterPiece> sorted(by_layer_.at(l));
    std::sort(sorted.begin(), sorted.end(), [](const ParameterPiece& a, const ParameterPiece& b) {
      return a.position < b.position;
    });
    return sorted;
  }

 private:
  std::vector<std::vector<ParameterPiece>> by_layer_;
};

} // namespace zero
