#pragma once
// Which gradient elements travel together. A layout with equal slices gives every layer (layer) a
// flat buffer of N equal blocks; a bucket is a list of slices, each "elements [lo, hi) of every
// rank's block of layer g". Buckets are filled from the last layer backwards (the order backward
// produces gradients), hold at most `bucket_elements` elements, and cut a layer that does not fit
// into several buckets, so their memory never depends on the model's size (ZeRO-R's constant
// buffers).
//
// Inside a bucket, slices are in ascending (layer, lo) order and the buffer is rank-major:
//   [rank 0: slice 0, slice 1, ...][rank 1: slice 0, slice 1, ...]...
// so one reduce-scatter of the bucket leaves on rank r a run of its shard that is contiguous
// (blocks sit in the shard in layer order), and an all-reduce works on the same buffer.

#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zero {

struct BucketSlice {
  std::size_t layer = 0;
  std::size_t lo = 0; // within every rank's block of the layer
  std::size_t hi = 0;
  std::size_t size() const noexcept { return hi - lo; }
};

struct Bucket {
  std::vector<BucketSlice> slices; // ascending (layer, lo)
  std::vector<std::size_t> layers; // distinct layers of the slices
  std::size_t block_elements = 0;  // per rank: the sum of the slices' sizes
  std::size_t shard_offset = 0;    // where the first slice starts in every rank's shard
  std::size_t elements(int ranks) const noexcept { return block_elements * std::size_t(ranks); }
};

class BucketPlan {
 public:
  BucketPlan(const ShardLayout& layout, std::size_t bucket_elements)
      : ranks_(layout.world_size()), buckets_of_layer_(layout.layer_count()) {
    layout.require_equal_slices("bucketed gradient reduction");
    require(bucket_elements > 0, "reduce bucket size must be at least one element");
    // Capacity per rank's block: at least one element, whatever the bucket size.
    const std::size_t capacity = std::max<std::size_t>(1, bucket_elements / std::size_t(ranks_));
    Bucket open;
    auto close = [&] {
      const BucketSlice& first = open.slices.front();
      open.shard_offset = layout.block(first.layer, 0).begin + first.lo;
      largest_block_ = std::max(largest_block_, open.block_elements);
      buckets_.push_back(std::move(open));
      open = Bucket{};
    };
    for (std::size_t g = layout.layer_count(); g-- > 0;) {
      for (std::size_t hi = layout.layer(g).block_numel; hi > 0;) {
        const std::size_t lo = hi - std::min(capacity - open.block_elements, hi);
        open.slices.insert(open.slices.begin(), BucketSlice{g, lo, hi});
        open.block_elements += hi - lo;
        hi = lo;
        if (open.block_elements == capacity) close();
      }
    }
    if (!open.slices.empty()) close();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      for (const BucketSlice& s : buckets_[b].slices) {
        auto& layers = buckets_[b].layers;
        if (layers.empty() || layers.back() != s.layer) layers.push_back(s.layer);
        auto& of_layer = buckets_of_layer_[s.layer];
        if (of_layer.empty() || of_layer.back() != b) of_layer.push_back(b);
      }
    }
  }

  int ranks() const noexcept { return ranks_; }
  std::size_t size() const noexcept { return buckets_.size(); }
  const Bucket& operator[](std::size_t b) const { return buckets_.at(b); }
  // The largest bucket, all ranks' blocks: what a bucket buffer must hold.
  std::size_t largest_bucket_elements() const noexcept {
    return largest_block_ * std::size_t(ranks_);
  }
  // The buckets that hold a slice of layer g, ascending (the layer's high slices first).
  const std::vector<std::size_t>& buckets_of(std::size_t layer) const {
    return buckets_of_layer_.at(layer);
  }

 private:
  int ranks_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::size_t>> buckets_of_layer_;
  std::size_t largest_block_ = 0;
};

} // namespace zero
