#pragma once
// Which gradient elements travel together. A bucket is a list of slices, each "positions [lo, hi)
// of every rank's block of layer l". Buckets are filled from the last layer backwards (the order
// backward produces gradients), hold at most `bucket_elements` elements over all ranks' sections,
// and cut a layer that does not fit into several buckets, so their memory never depends on the
// model's size (ZeRO-R's constant buffers).
//
// Inside a bucket, slices are in ascending (layer, lo) order and the buffer is rank-major: rank 0's
// section (its part of every slice), then rank 1's, ... A rank's part of a slice is [lo, hi)
// clipped to its own block, so with unequal blocks (whole parameters on one rank) the sections
// differ in size and the bucket is reduced with per-rank counts. Either way, one reduce-scatter
// leaves on rank r a run of its shard that is contiguous (blocks sit in the shard in layer order),
// and an all-reduce works on the same buffer.

#include "zero/core/error.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace zero {

struct BucketSlice {
  std::size_t layer = 0;
  std::size_t lo = 0; // within every rank's block of the layer
  std::size_t hi = 0;
};

struct Bucket {
  std::vector<BucketSlice> slices;       // ascending (layer, lo)
  std::vector<std::size_t> layers;       // distinct layers of the slices
  std::vector<std::size_t> counts;       // per rank: the size of its section
  std::vector<std::size_t> section;      // per rank: where its section starts in the buffer
  std::vector<std::size_t> shard_offset; // per rank: where its section lands in its shard
  std::size_t elements = 0;              // all sections
  bool equal_counts = true;
};

class BucketPlan {
 public:
  BucketPlan(const ShardLayout& layout, std::size_t bucket_elements)
      : layout_(&layout), ranks_(layout.world_size()), buckets_of_layer_(layout.layer_count()) {
    require(bucket_elements > 0, "reduce bucket size must be at least one element");
    Bucket open;
    std::size_t filled = 0; // elements of the open bucket, all ranks' sections
    auto close = [&] {
      index(open);
      largest_ = std::max(largest_, open.elements);
      buckets_.push_back(std::move(open));
      open = Bucket{};
      filled = 0;
    };
    for (std::size_t l = layout.layer_count(); l-- > 0;) {
      for (std::size_t hi = layout.layer(l).block_numel; hi > 0;) {
        std::size_t lo = lowest_start(l, hi, bucket_elements - filled);
        if (lo == hi) { // not even one position fits
          if (!open.slices.empty()) {
            close();
            continue;
          }
          lo = hi - 1; // an empty bucket takes one position, whatever the size
        }
        open.slices.insert(open.slices.begin(), BucketSlice{l, lo, hi});
        filled += elements(l, lo, hi);
        hi = lo;
        if (lo > 0 || filled == bucket_elements) close(); // full
      }
    }
    if (!open.slices.empty()) close();
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (std::size_t l : buckets_[b].layers)
        buckets_of_layer_[l].push_back(b);
  }

  int ranks() const noexcept { return ranks_; }
  std::size_t size() const noexcept { return buckets_.size(); }
  const Bucket& operator[](std::size_t b) const { return buckets_.at(b); }
  // The largest bucket, all ranks' sections: what a bucket buffer must hold.
  std::size_t largest_bucket_elements() const noexcept { return largest_; }
  // The buckets that hold a slice of layer l, ascending (the layer's high slices first).
  const std::vector<std::size_t>& buckets_of(std::size_t layer) const {
    return buckets_of_layer_.at(layer);
  }
  // Rank r's part of a slice: its positions within r's block of the slice's layer.
  std::size_t part(const BucketSlice& s, int r) const {
    const std::size_t block = layout_->block(s.layer, r).size();
    return std::min(s.hi, block) - std::min(s.lo, block);
  }
  // All ranks' parts of positions [lo, hi) of layer l.
  std::size_t elements(std::size_t l, std::size_t lo, std::size_t hi) const {
    std::size_t total = 0;
    for (int r = 0; r < ranks_; ++r)
      total += part(BucketSlice{l, lo, hi}, r);
    return total;
  }

 private:
  // The lowest lo whose positions [lo, hi) of layer l hold at most `room` elements over all ranks
  // (hi when not even one position fits). With equal blocks that is hi - room / ranks; with
  // unequal ones a position holds elements only on the ranks whose block reaches it.
  std::size_t lowest_start(std::size_t l, std::size_t hi, std::size_t room) const {
    std::size_t fits = hi, fails = 0; // elements(fits, hi) <= room, elements(fails, hi) > room
    if (elements(l, 0, hi) <= room) return 0;
    while (fits - fails > 1) {
      const std::size_t mid = fails + (fits - fails) / 2;
      (elements(l, mid, hi) <= room ? fits : fails) = mid;
    }
    return fits;
  }

  void index(Bucket& bucket) const {
    const auto ranks = static_cast<std::size_t>(ranks_);
    bucket.counts.assign(ranks, 0);
    bucket.section.assign(ranks, 0);
    bucket.shard_offset.assign(ranks, 0);
    for (const BucketSlice& s : bucket.slices) {
      if (bucket.layers.empty() || bucket.layers.back() != s.layer)
        bucket.layers.push_back(s.layer);
      for (int r = 0; r < ranks_; ++r)
        bucket.counts[std::size_t(r)] += part(s, r);
    }
    const BucketSlice& first = bucket.slices.front();
    for (int r = 0; r < ranks_; ++r) {
      const Range block = layout_->block(first.layer, r);
      bucket.shard_offset[std::size_t(r)] = block.begin + std::min(first.lo, block.size());
      if (r > 0)
        bucket.section[std::size_t(r)] =
            bucket.section[std::size_t(r) - 1] + bucket.counts[std::size_t(r) - 1];
    }
    bucket.elements = bucket.section.back() + bucket.counts.back();
    bucket.equal_counts = std::all_of(bucket.counts.begin(), bucket.counts.end(),
                                      [&](std::size_t c) { return c == bucket.counts.front(); });
  }

  const ShardLayout* layout_;
  int ranks_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::size_t>> buckets_of_layer_;
  std::size_t largest_ = 0;
};

} // namespace zero
