#pragma once
// gather_layer_image: every rank's block of one layer, all-gathered into the layer's image (its
// flat buffer: rank 0's block, rank 1's, ...) on every rank. One all-gather of equal blocks, or,
// where the layout gives ranks blocks of different sizes, one with per-rank counts, so unequal
// layouts move exactly their elements and no padding. gather_layer_image_in_pieces bounds the
// elements one collective moves (DeepSpeed's allgather_bucket_size).

#include "zero/comm/communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace zero {

// Whether every rank's block of layer l has the same size.
inline bool equal_blocks(const ShardLayout& layout, std::size_t l) {
  const std::size_t first = layout.block(l, 0).size();
  for (int r = 1; r < layout.world_size(); ++r)
    if (layout.block(l, r).size() != first) return false;
  return true;
}

// `mine` is this rank's block of layer l; it may lie at its own place inside `image` (in place).
template <GatheringCommunicator Comm, class T, class Space>
Work gather_layer_image(Comm& comm, const ShardLayout& layout, std::size_t l,
                        View<const T, Space> mine, View<T, Space> image) {
  const Range at = layout.flat_range(l, comm.rank());
  if (image.size() != layout.layer(l).flat_numel || mine.size() != at.size())
    fail(ErrorKind::invalid_argument,
         "gather_layer_image: layer " + std::to_string(l) + " has an image of " +
             std::to_string(layout.layer(l).flat_numel) + " elements and a block of " +
             std::to_string(at.size()) + " on this rank; got " + std::to_string(image.size()) +
             " and " + std::to_string(mine.size()));
  const bool in_place = mine.data() == image.data() + at.begin;
  if (equal_blocks(layout, l))
    return in_place ? comm.all_gather(image) : comm.all_gather(mine, image);
  if constexpr (VariableCountCommunicator<Comm>) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r)
      counts[std::size_t(r)] = layout.block(l, r).size();
    return comm.all_gather(mine, image, counts);
  } else {
    fail(ErrorKind::unsupported,
         "gather_layer_image: the ranks' blocks of layer " + std::to_string(l) +
             " differ in size, which needs a communicator with per-rank counts "
             "(zero::VariableCountCommunicator)");
  }
}

// The same gather as collectives of at most `piece` elements each: the image is cut into
// contiguous pieces, and each piece is all-gathered with per-rank counts, every rank giving the
// part of its block that falls in the piece (most give nothing). Each piece lands in place, so no
// staging buffer is needed; the bytes moved are the same as one gather's. One Work per piece.
template <GatheringCommunicator Comm, class T, class Space>
std::vector<Work> gather_layer_image_in_pieces(Comm& comm, const ShardLayout& layout, std::size_t l,
                                               View<const T, Space> mine, View<T, Space> image,
                                               std::size_t piece) {
  require(piece >= 1, "gather_layer_image_in_pieces: pieces must hold at least one element");
  std::vector<Work> works;
  if (image.size() <= piece || comm.size() == 1) {
    works.push_back(gather_layer_image(comm, layout, l, mine, image));
    return works;
  }
  if constexpr (VariableCountCommunicator<Comm>) {
    const Range at = layout.flat_range(l, comm.rank());
    require(mine.size() == at.size() && image.size() == layout.layer(l).flat_numel,
            "gather_layer_image_in_pieces: layer " + std::to_string(l) +
                "'s block or image has the wrong size");
    std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()));
    for (std::size_t begin = 0; begin < image.size(); begin += piece) {
      const std::size_t end = std::min(image.size(), begin + piece);
      for (int r = 0; r < comm.size(); ++r) {
        const Range block = layout.flat_range(l, r);
        const std::size_t lo = std::max(begin, block.begin), hi = std::min(end, block.end);
        counts[std::size_t(r)] = hi > lo ? hi - lo : 0;
      }
      const std::size_t from = std::clamp(begin, at.begin, at.end) - at.begin;
      const View<const T, Space> part = mine.subview(from, counts[std::size_t(comm.rank())]);
      works.push_back(comm.all_gather(part, image.subview(begin, end - begin),
                                      std::span<const std::size_t>(counts)));
    }
    return works;
  } else {
    fail(ErrorKind::unsupported,
         "gather_layer_image_in_pieces: layer " + std::to_string(l) + " (" +
             std::to_string(image.size()) + " elements) is larger than the gather bucket (" +
             std::to_string(piece) +
             ", allgather_bucket_size), and gathering it in pieces needs "
             "a communicator with per-rank counts (zero::VariableCountCommunicator)");
  }
}

} // namespace zero
