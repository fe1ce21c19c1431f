#pragma once
// LayoutBuilder: how a partitioner writes a ShardLayout. It lays out layers one after the other;
// within a layer it appends parameter pieces and padding to the end of each rank's block, so the
// shard offsets follow from the order of the calls. finish() checks what no partitioner may get
// wrong (every element placed exactly once, equal blocks when claimed) and indexes the result.
//
//   LayoutBuilder b(params, world_size, {.policy = "mine", .equal_slices = false});
//   for (std::size_t g = 0; g < b.layer_count(); ++g) {
//     b.begin_layer(g);
//     for (std::size_t p : b.layer_parameters(g)) b.place(p, some_rank, 0, b.parameter(p).numel);
//   }
//   return std::move(b).finish();

#include "zero/core/error.hpp"
#include "zero/shard/detail/hash.hpp"
#include "zero/shard/detail/parameter_table.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct LayoutOptions {
  std::string policy;        // the partitioner and its options, part of the layout's hash
  bool equal_slices = false; // a promise, checked by finish()
};

class LayoutBuilder {
 public:
  LayoutBuilder(std::span<const ParameterSpec> parameters, int world_size, LayoutOptions options)
      : layout_(validated(parameters, world_size, options)),
        rank_segments_(static_cast<std::size_t>(world_size)),
        rank_end_(static_cast<std::size_t>(world_size), 0) {
    layout_.policy_ = std::move(options.policy);
    layout_.world_size_ = world_size;
    layout_.equal_slices_ = options.equal_slices;
    layout_.blocks_.resize(layer_count() * ranks());
  }

  int world_size() const noexcept { return layout_.world_size_; }
  std::size_t parameter_count() const noexcept { return table().parameters.size(); }
  const ParameterSpec& parameter(std::size_t p) const { return table().parameters.at(p); }
  std::size_t layer_count() const noexcept { return table().layer_count(); }
  const LayerInfo& layer(std::size_t g) const { return table().layers.at(g); }
  std::span<const std::size_t> layer_parameters(std::size_t g) const { return table().members(g); }

  // Starts layer g (layers go in order 0, 1, ...): its blocks begin where each rank's shard ends.
  void begin_layer(std::size_t g) {
    if (g != next_layer_)
      fail(ErrorKind::invalid_argument, where() + "began layer index " + std::to_string(g) +
                                            " but layer index " + std::to_string(next_layer_) +
                                            " is next (layers are laid out in order)");
    close_layer();
    current_layer_ = g;
    ++next_layer_;
    for (std::size_t r = 0; r < ranks(); ++r)
      layout_.blocks_[g * ranks() + r].begin = rank_end_[r];
  }

  // Appends elements [offset, offset + length) of parameter p to the end of rank's block.
  void place(std::size_t p, int rank, std::size_t offset, std::size_t length) {
    const std::size_t r = checked_rank(rank);
    if (p >= parameter_count())
      fail(ErrorKind::invalid_argument, where() + "placed parameter #" + std::to_string(p) +
                                            " but there are " + std::to_string(parameter_count()));
    const ParameterSpec& spec = table().parameters[p];
    if (current_layer_ == none || table().layer_of[p] != current_layer_)
      fail(ErrorKind::invalid_argument,
           where() + "placed " + detail::describe_parameter(spec) +
               (current_layer_ == none
                    ? std::string(" before beginning a layer")
                    : " while laying out layer " + std::to_string(layer(current_layer_).id)));
    if (offset > spec.numel || length > spec.numel - offset)
      fail(ErrorKind::invalid_argument, where() + "placed elements [" + std::to_string(offset) +
                                            ", " + std::to_string(offset + length) + ") of " +
                                            detail::describe_parameter(spec));
    if (length == 0) return;
    rank_segments_[r].push_back(Segment{p, rank, offset, rank_end_[r], length});
    rank_end_[r] += length;
  }
  // Appends `count` padding elements to rank's block.
  void pad(int rank, std::size_t count) {
    const std::size_t r = checked_rank(rank);
    if (current_layer_ == none)
      fail(ErrorKind::invalid_argument,
           where() + "padded rank " + std::to_string(rank) + " before beginning a layer");
    rank_end_[r] += count;
  }
  // Pads rank's block of the current layer to `size` elements.
  void pad_block_to(int rank, std::size_t size) {
    const std::size_t current = block_size(rank);
    if (size < current)
      fail(ErrorKind::invalid_argument, where() + "cannot pad rank " + std::to_string(rank) +
                                            "'s block of " + std::to_string(current) +
                                            " elements down to " + std::to_string(size));
    pad(rank, size - current);
  }
  // Elements in rank's block of the current layer so far.
  std::size_t block_size(int rank) const {
    const std::size_t r = checked_rank(rank);
    if (current_layer_ == none) return 0;
    return rank_end_[r] - layout_.blocks_[current_layer_ * ranks() + r].begin;
  }

  // Checks and indexes the layout. Throws Error naming the first parameter or layer at fault.
  ShardLayout finish() && {
    close_layer();
    if (next_layer_ != layer_count())
      fail(ErrorKind::invalid_argument,
           where() + "laid out " + std::to_string(next_layer_) + " of " +
               std::to_string(layer_count()) + " layers; layer " +
               std::to_string(layer(next_layer_).id) + " was never begun");
    if (layout_.equal_slices_) check_equal_blocks();
    index_flat_buffers();
    index_rank_segments();
    index_parameter_segments();
    index_layer_offsets();
    layout_.hash_ = hash();
    return std::move(layout_);
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  static detail::ParameterTable validated(std::span<const ParameterSpec> parameters, int world_size,
                                          const LayoutOptions& options) {
    if (world_size < 1)
      fail(ErrorKind::invalid_argument, "shard layout (" + options.policy +
                                            "): world size must be at least "
                                            "1, got " +
                                            std::to_string(world_size));
    return detail::ParameterTable(parameters);
  }

  const detail::ParameterTable& table() const noexcept { return layout_.table_; }
  std::size_t ranks() const noexcept { return static_cast<std::size_t>(layout_.world_size_); }
  std::string where() const { return "partitioner " + layout_.policy_ + " "; }
  std::size_t checked_rank(int rank) const {
    if (rank < 0 || rank >= layout_.world_size_)
      fail(ErrorKind::invalid_argument, where() + "used rank " + std::to_string(rank) +
                                            " in a world of " + std::to_string(world_size()));
    return static_cast<std::size_t>(rank);
  }
  void close_layer() {
    if (current_layer_ == none) return;
    for (std::size_t r = 0; r < ranks(); ++r)
      layout_.blocks_[current_layer_ * ranks() + r].end = rank_end_[r];
  }

  void check_equal_blocks() const {
    for (std::size_t g = 0; g < layer_count(); ++g)
      for (std::size_t r = 1; r < ranks(); ++r) {
        const Range first = layout_.blocks_[g * ranks()];
        const Range other = layout_.blocks_[g * ranks() + r];
        if (first.size() != other.size())
          fail(ErrorKind::invalid_argument,
               where() + "promises equal slices, but in layer " + std::to_string(layer(g).id) +
                   " rank 0's block has " + std::to_string(first.size()) + " elements and rank " +
                   std::to_string(r) + "'s has " + std::to_string(other.size()));
      }
  }

  void index_flat_buffers() {
    std::size_t base = 0;
    layout_.block_flat_begin_.resize(layout_.blocks_.size());
    for (std::size_t g = 0; g < layer_count(); ++g) {
      LayerInfo& info = layout_.table_.layers[g];
      std::size_t flat = 0;
      info.block_numel = 0;
      for (std::size_t r = 0; r < ranks(); ++r) {
        const Range block = layout_.blocks_[g * ranks() + r];
        layout_.block_flat_begin_[g * ranks() + r] = flat;
        flat += block.size();
        info.block_numel = std::max(info.block_numel, block.size());
      }
      info.flat_base = base;
      info.flat_numel = flat;
      base += flat;
    }
    layout_.shard_numel_ = rank_end_;
    layout_.max_shard_numel_ =
        rank_end_.empty() ? 0 : *std::max_element(rank_end_.begin(), rank_end_.end());
  }

  void index_rank_segments() {
    std::size_t total = 0;
    for (const auto& s : rank_segments_)
      total += s.size();
    layout_.by_rank_.reserve(total);
    layout_.rank_segment_begin_.assign(1, 0);
    layout_.owned_numel_.assign(ranks(), 0);
    for (std::size_t r = 0; r < ranks(); ++r) {
      for (const Segment& s : rank_segments_[r]) {
        layout_.by_rank_.push_back(s);
        layout_.owned_numel_[r] += s.length;
      }
      layout_.rank_segment_begin_.push_back(layout_.by_rank_.size());
      std::vector<Segment>().swap(rank_segments_[r]);
    }
  }

  // Counting sort by parameter, then a check that each parameter's pieces tile it exactly.
  void index_parameter_segments() {
    const std::size_t n = parameter_count();
    auto& begin = layout_.parameter_segment_begin_;
    begin.assign(n + 1, 0);
    for (const Segment& s : layout_.by_rank_)
      ++begin[s.parameter + 1];
    for (std::size_t p = 0; p < n; ++p)
      begin[p + 1] += begin[p];
    layout_.by_parameter_.resize(layout_.by_rank_.size());
    std::vector<std::size_t> next(begin.begin(), begin.end() - 1);
    for (const Segment& s : layout_.by_rank_)
      layout_.by_parameter_[next[s.parameter]++] = s;
    for (std::size_t p = 0; p < n; ++p) {
      auto first = layout_.by_parameter_.begin() + static_cast<std::ptrdiff_t>(begin[p]);
      auto last = layout_.by_parameter_.begin() + static_cast<std::ptrdiff_t>(begin[p + 1]);
      auto by_offset = [](const Segment& a, const Segment& b) {
        return a.parameter_offset < b.parameter_offset;
      };
      if (!std::is_sorted(first, last, by_offset)) std::sort(first, last, by_offset);
      std::size_t covered = 0;
      for (auto it = first; it != last; ++it) {
        if (it->parameter_offset != covered) report_tiling_error(p, covered, it->parameter_offset);
        covered += it->length;
      }
      if (covered != table().parameters[p].numel)
        report_tiling_error(p, covered, table().parameters[p].numel);
    }
  }

  [[noreturn]] void report_tiling_error(std::size_t p, std::size_t covered,
                                        std::size_t next) const {
    const std::string what = detail::describe_parameter(table().parameters[p]);
    if (next > covered)
      fail(ErrorKind::invalid_argument, where() + "left elements [" + std::to_string(covered) +
                                            ", " + std::to_string(next) + ") of " + what +
                                            " without an owner");
    fail(ErrorKind::invalid_argument,
         where() + "placed element " + std::to_string(next) + " of " + what + " more than once");
  }

  void index_layer_offsets() {
    const std::size_t n = parameter_count();
    layout_.layer_offset_.assign(n, 0);
    for (std::size_t p = 0; p < n; ++p) {
      const auto pieces = layout_.segments(p);
      if (pieces.empty()) continue;
      std::size_t expected = layout_.flat_offset(pieces.front());
      layout_.layer_offset_[p] = expected;
      for (const Segment& s : pieces) {
        if (layout_.flat_offset(s) != expected) {
          layout_.layer_offset_[p] = ShardLayout::not_contiguous;
          break;
        }
        expected += s.length;
      }
    }
  }

  std::uint64_t hash() const {
    detail::LayoutHasher h;
    h.add(table().hash);
    h.add(layout_.policy_);
    h.add(static_cast<std::uint64_t>(layout_.world_size_));
    h.add(static_cast<std::uint64_t>(layout_.equal_slices_));
    for (const Range& b : layout_.blocks_) {
      h.add(static_cast<std::uint64_t>(b.begin));
      h.add(static_cast<std::uint64_t>(b.end));
    }
    for (const Segment& s : layout_.by_rank_) {
      h.add(static_cast<std::uint64_t>(s.parameter));
      h.add(static_cast<std::uint64_t>(s.rank));
      h.add(static_cast<std::uint64_t>(s.parameter_offset));
      h.add(static_cast<std::uint64_t>(s.shard_offset));
      h.add(static_cast<std::uint64_t>(s.length));
    }
    return h.value();
  }

  ShardLayout layout_;
  std::vector<std::vector<Segment>> rank_segments_;
  std::vector<std::size_t> rank_end_;
  std::size_t current_layer_ = none;
  std::size_t next_layer_ = 0;
};

} // namespace zero
