#pragma once
// SubGroupPlan: how the optimizer step walks a shard kept on NVMe. DeepSpeed's `sub_group_size`
// elements at a time: each sub-group is read into a bounce slot, updated, and written back, and
// the pipeline reads the next sub-group while updating this one and writing the previous one.
//
// A sub-group is a list of pieces, each a run of one layer's block on this rank. On disk every
// layer's block starts at an aligned offset (NvmeSlice), so a piece starts on an alignment boundary
// when it starts at a multiple of `alignment` elements of its block; in the slot, pieces are laid
// out at aligned offsets too, so every read and write is one aligned transfer of whole units. A
// sub-group holds at most `sub_group_elements` slot elements, padding included; a layer larger
// than that is cut into several sub-groups at aligned positions.

#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct SubGroupPiece {
  std::size_t layer = 0;
  Range part;         // positions within this rank's block of the layer
  std::size_t at = 0; // where the piece starts in its slot (elements, aligned)
};

struct SubGroup {
  std::vector<SubGroupPiece> pieces; // ascending layer, then position
  std::size_t elements = 0;          // slot elements it spans, the last piece rounded up
};

class SubGroupPlan {
 public:
  // `alignment`: elements per aligned unit (4096 bytes of the element type).
  SubGroupPlan(const ShardLayout& layout, int rank, std::size_t sub_group_elements,
               std::size_t alignment)
      : alignment_(alignment),
        capacity_(round_up(std::max(sub_group_elements, alignment), alignment)),
        last_piece_of_layer_(layout.layer_count(), none) {
    require(alignment >= 1, "sub-groups: the alignment must be at least one element");
    SubGroup open;
    auto close = [&] {
      if (open.pieces.empty()) return;
      groups_.push_back(std::move(open));
      open = SubGroup{};
    };
    for (std::size_t l = 0; l < layout.layer_count(); ++l) {
      const std::size_t block = layout.block(l, rank).size();
      for (std::size_t begin = 0; begin < block;) {
        if (open.elements == capacity_) close();
        const std::size_t room = capacity_ - open.elements;
        const std::size_t end = std::min(block, begin + room);
        open.pieces.push_back({l, Range{begin, end}, open.elements});
        open.elements += round_up(end - begin, alignment_);
        begin = end;
      }
      if (block > 0) last_piece_of_layer_[l] = groups_.size();
    }
    close();
    largest_ = 0;
    for (const SubGroup& g : groups_)
      largest_ = std::max(largest_, g.elements);
  }

  std::size_t size() const noexcept { return groups_.size(); }
  const SubGroup& operator[](std::size_t k) const { return groups_.at(k); }
  // Slot elements the largest sub-group needs (at most sub_group_elements, rounded up).
  std::size_t largest_elements() const noexcept { return largest_; }
  std::size_t alignment() const noexcept { return alignment_; }
  // Whether sub-group k holds the last piece of layer l (the layer is complete after it).
  bool completes(std::size_t k, std::size_t l) const { return last_piece_of_layer_.at(l) == k; }

  static std::size_t round_up(std::size_t n, std::size_t unit) noexcept {
    return (n + unit - 1) / unit * unit;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::size_t alignment_;
  std::size_t capacity_;
  std::vector<SubGroup> groups_;
  std::vector<std::size_t> last_piece_of_layer_;
  std::size_t largest_ = 0;
};

} // namespace zero
