#pragma once
// ShardLayout: where every element of a list of parameters lives across the ranks of a layer.
// Partitioners make it (through LayoutBuilder, which checks that every element has exactly one
// owner); everything else only reads it. It is a value: deterministic, identical on every rank
// that registered the same parameters, and cheap to query in every direction:
//   (parameter, offset) -> (rank, shard offset)      locate()
//   element of the logical tensor -> (rank, ...)     locate_element(), owner_of()
//   (rank, shard offset) -> (parameter, offset)      element_at()
//   (layer, flat offset) <-> (rank, shard offset)    locate_flat(), flat_offset()
// The coordinates are described in parameter.hpp.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/detail/parameter_table.hpp"
#include "zero/shard/parameter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero {

class LayoutBuilder;

class ShardLayout {
 public:
  // --- what it was built from ---------------------------------------------------------------
  int world_size() const noexcept { return world_size_; }
  // The partitioner and its options, e.g. "flat_contiguous(alignment=16)".
  std::string_view policy() const noexcept { return policy_; }
  // Whether every rank's block of a layer has the same size: what reduce-scatter and all-gather
  // into one flat buffer need. False for partitioners that keep parameters whole (greedy).
  bool equal_slices() const noexcept { return equal_slices_; }
  // Throws a readable error naming `what` unless the layout has equal slices.
  void require_equal_slices(std::string_view what) const {
    if (!equal_slices_)
      fail(ErrorKind::unsupported, std::string(what) +
                                       " needs equal blocks on every rank, but the " + policy_ +
                                       " layout gives ranks unequal shards");
  }

  // --- parameters ------------------------------------------------------------------------------
  std::size_t parameter_count() const noexcept { return table_.parameters.size(); }
  std::span<const ParameterSpec> parameters() const noexcept { return table_.parameters; }
  const ParameterSpec& parameter(std::size_t p) const { return table_.parameters.at(p); }
  std::optional<std::size_t> find(std::string_view name) const { return table_.find(name); }
  // Elements of all parameters, padding excluded: the size of the logical tensor.
  std::size_t numel() const noexcept { return table_.numel(); }
  // Where parameter p sits in the logical tensor.
  Range element_range(std::size_t p) const {
    check_parameter(p);
    return {table_.element_offsets[p], table_.element_offsets[p + 1]};
  }
  std::size_t layer_of(std::size_t p) const {
    check_parameter(p);
    return table_.layer_of[p];
  }

  // --- layers ----------------------------------------------------------------------------------
  std::size_t layer_count() const noexcept { return table_.layers.size(); }
  const LayerInfo& layer(std::size_t g) const { return table_.layers.at(g); }
  // The layer's parameters in registration order.
  std::span<const std::size_t> layer_parameters(std::size_t g) const {
    check_layer(g);
    return table_.members(g);
  }
  std::optional<std::size_t> find_layer(int id) const {
    auto it = std::lower_bound(table_.layers.begin(), table_.layers.end(), id,
                               [](const LayerInfo& g, int i) { return g.id < i; });
    if (it == table_.layers.end() || it->id != id) return std::nullopt;
    return static_cast<std::size_t>(it - table_.layers.begin());
  }
  // Rank r's block of layer g, in r's shard.
  Range block(std::size_t g, int rank) const { return blocks_[block_index(g, rank)]; }
  // Rank r's block of layer g, in the layer's flat buffer.
  Range flat_range(std::size_t g, int rank) const {
    const std::size_t i = block_index(g, rank);
    return {block_flat_begin_[i], block_flat_begin_[i] + blocks_[i].size()};
  }
  // Offset of parameter p's first element in its layer's flat buffer, when the parameter is one
  // run of that buffer (flat contiguous and whole-parameter layouts); nullopt when its pieces are
  // apart (per-parameter layouts, where each rank's piece sits in that rank's block).
  std::optional<std::size_t> layer_offset(std::size_t p) const {
    check_parameter(p);
    if (layer_offset_[p] == not_contiguous) return std::nullopt;
    return layer_offset_[p];
  }

  // --- ranks -----------------------------------------------------------------------------------
  std::size_t shard_numel(int rank) const { return shard_numel_[rank_index(rank)]; }
  std::size_t max_shard_numel() const noexcept { return max_shard_numel_; }
  std::size_t owned_numel(int rank) const { return owned_numel_[rank_index(rank)]; }
  std::size_t padding(int rank) const { return shard_numel(rank) - owned_numel(rank); }
  // Bytes of rank r's shard, padding included, in each layer's element type.
  std::size_t bytes(int rank) const {
    std::size_t total = 0;
    for (std::size_t g = 0; g < layer_count(); ++g)
      total += block(g, rank).size() * size_of(table_.layers[g].dtype);
    return total;
  }
  // Parameter p's pieces, in order of parameter_offset.
  std::span<const Segment> segments(std::size_t p) const {
    check_parameter(p);
    return {by_parameter_.data() + parameter_segment_begin_[p],
            parameter_segment_begin_[p + 1] - parameter_segment_begin_[p]};
  }
  // Rank r's pieces, in order of shard_offset.
  std::span<const Segment> rank_segments(int rank) const {
    const std::size_t r = rank_index(rank);
    return {by_rank_.data() + rank_segment_begin_[r],
            rank_segment_begin_[r + 1] - rank_segment_begin_[r]};
  }
  // The parameters with at least one element on rank r, ascending.
  std::vector<std::size_t> parameters_on(int rank) const {
    std::vector<std::size_t> result;
    for (const Segment& s : rank_segments(rank))
      result.push_back(s.parameter);
    std::sort(result.begin(), result.end());
    result.erase(std::unique(result.begin(), result.end()), result.end());
    return result;
  }

  // --- mapping ---------------------------------------------------------------------------------
  Location locate(std::size_t p, std::size_t offset) const {
    const auto pieces = segments(p);
    if (offset >= parameter(p).numel)
      fail(ErrorKind::invalid_argument, "shard layout: element " + std::to_string(offset) +
                                            " is outside parameter " +
                                            detail::describe_parameter(parameter(p)));
    auto it =
        std::upper_bound(pieces.begin(), pieces.end(), offset,
                         [](std::size_t o, const Segment& s) { return o < s.parameter_offset; });
    const Segment& s = *(it - 1);
    return {s.rank, s.shard_offset + (offset - s.parameter_offset)};
  }
  int owner(std::size_t p, std::size_t offset) const { return locate(p, offset).rank; }
  // Parameter and offset of element e of the logical tensor.
  ElementRef element(std::size_t e) const {
    if (e >= numel())
      fail(ErrorKind::invalid_argument, "shard layout: element " + std::to_string(e) +
                                            " is outside a tensor of " + std::to_string(numel()));
    const auto& offsets = table_.element_offsets;
    // The last parameter starting at or before e is the non-empty one that holds it.
    auto it = std::upper_bound(offsets.begin(), offsets.end() - 1, e);
    const auto p = static_cast<std::size_t>(it - offsets.begin()) - 1;
    return {p, e - offsets[p]};
  }
  Location locate_element(std::size_t e) const {
    const ElementRef ref = element(e);
    return locate(ref.parameter, ref.offset);
  }
  int owner_of(std::size_t e) const { return locate_element(e).rank; }
  // The parameter element at a shard position, or nullopt for padding.
  std::optional<ElementRef> element_at(int rank, std::size_t shard_offset) const {
    const auto pieces = rank_segments(rank);
    auto it = std::upper_bound(pieces.begin(), pieces.end(), shard_offset,
                               [](std::size_t o, const Segment& s) { return o < s.shard_offset; });
    if (it == pieces.begin()) return std::nullopt;
    const Segment& s = *(it - 1);
    if (shard_offset - s.shard_offset >= s.length) return std::nullopt;
    return ElementRef{s.parameter, s.parameter_offset + (shard_offset - s.shard_offset)};
  }
  // Where a segment's first element lands in its layer's flat buffer.
  std::size_t flat_offset(const Segment& s) const {
    const std::size_t i = block_index(table_.layer_of[s.parameter], s.rank);
    return block_flat_begin_[i] + (s.shard_offset - blocks_[i].begin);
  }
  // The owner and shard position of a position in layer g's flat buffer.
  Location locate_flat(std::size_t g, std::size_t flat) const {
    check_layer(g);
    if (flat >= table_.layers[g].flat_numel)
      fail(ErrorKind::invalid_argument,
           "shard layout: flat offset " + std::to_string(flat) + " is outside layer " +
               std::to_string(table_.layers[g].id) + " of " +
               std::to_string(table_.layers[g].flat_numel) + " elements");
    const std::size_t first = g * rank_count();
    auto begins = std::span(block_flat_begin_).subspan(first, rank_count());
    // Empty blocks share their begin with the next block; the last candidate is the one holding it.
    const auto r = static_cast<std::size_t>(std::upper_bound(begins.begin(), begins.end(), flat) -
                                            begins.begin()) -
                   1;
    return {static_cast<int>(r), blocks_[first + r].begin + (flat - begins[r])};
  }

  // Parameter p's pieces restricted to its elements [elements.begin, elements.end): where a
  // run of a parameter (a gradient bucket's share of it, say) lives.
  std::vector<Segment> segments_in(std::size_t p, Range elements) const {
    const auto pieces = segments(p);
    check_range(elements, parameter(p).numel, "elements of parameter " + parameter(p).name);
    std::vector<Segment> result;
    if (elements.empty()) return result;
    auto it =
        std::upper_bound(pieces.begin(), pieces.end(), elements.begin,
                         [](std::size_t o, const Segment& s) { return o < s.parameter_offset; });
    for (--it; it != pieces.end() && it->parameter_offset < elements.end; ++it)
      result.push_back(clip(*it, std::max(elements.begin, it->parameter_offset),
                            std::min(elements.end, it->parameter_offset + it->length)));
    return result;
  }
  // The pieces in positions [flat.begin, flat.end) of layer g's flat buffer, in flat order
  // (padding has none): which parameter elements a slice of the flat buffer carries.
  std::vector<Segment> flat_segments(std::size_t g, Range flat) const {
    check_layer(g);
    check_range(flat, table_.layers[g].flat_numel,
                "flat offsets of layer " + std::to_string(table_.layers[g].id));
    std::vector<Segment> result;
    if (flat.empty()) return result;
    for (int r = locate_flat(g, flat.begin).rank; r < world_size_; ++r) {
      const Range part = flat_range(g, r);
      if (part.begin >= flat.end) break;
      const std::size_t base = block(g, r).begin;
      const std::size_t low = base + (std::max(flat.begin, part.begin) - part.begin);
      const std::size_t high = base + (std::min(flat.end, part.end) - part.begin);
      const auto pieces = rank_segments(r);
      auto it =
          std::upper_bound(pieces.begin(), pieces.end(), low,
                           [](std::size_t o, const Segment& s) { return o < s.shard_offset; });
      if (it != pieces.begin() && (it - 1)->shard_offset + (it - 1)->length > low) --it;
      for (; it != pieces.end() && it->shard_offset < high; ++it) {
        const std::size_t from = std::max(low, it->shard_offset) - it->shard_offset;
        const std::size_t to = std::min(high, it->shard_offset + it->length) - it->shard_offset;
        result.push_back(clip(*it, it->parameter_offset + from, it->parameter_offset + to));
      }
    }
    return result;
  }

  // --- identity --------------------------------------------------------------------------------
  // Of everything above: equal on two ranks exactly when their layouts are.
  std::uint64_t hash() const noexcept { return hash_; }
  // Of the parameter list alone: tells "registered different parameters" from "partitioned the
  // same parameters differently".
  std::uint64_t parameters_hash() const noexcept { return table_.hash; }
  // One line for logs: policy, sizes, padding.
  std::string summary() const {
    std::size_t pad = 0;
    for (int r = 0; r < world_size_; ++r)
      pad += padding(r);
    return policy_ + ": " + std::to_string(parameter_count()) + " parameters (" +
           std::to_string(numel()) + " elements) in " + std::to_string(layer_count()) +
           " layer(s) over " + std::to_string(world_size_) + " rank(s); largest shard " +
           std::to_string(max_shard_numel_) + " elements, " + std::to_string(pad) +
           " padding elements in all";
  }

 private:
  friend class LayoutBuilder;
  static constexpr std::size_t not_contiguous = static_cast<std::size_t>(-1);

  explicit ShardLayout(detail::ParameterTable table) : table_(std::move(table)) {}

  std::size_t rank_count() const noexcept { return static_cast<std::size_t>(world_size_); }
  std::size_t rank_index(int rank) const {
    if (rank < 0 || rank >= world_size_)
      fail(ErrorKind::invalid_argument, "shard layout: rank " + std::to_string(rank) +
                                            " is not in a world of " + std::to_string(world_size_));
    return static_cast<std::size_t>(rank);
  }
  std::size_t block_index(std::size_t g, int rank) const {
    check_layer(g);
    return g * rank_count() + rank_index(rank);
  }
  void check_parameter(std::size_t p) const {
    if (p >= table_.parameters.size())
      fail(ErrorKind::invalid_argument, "shard layout: parameter #" + std::to_string(p) +
                                            " does not exist (there are " +
                                            std::to_string(table_.parameters.size()) + ")");
  }
  static Segment clip(const Segment& s, std::size_t begin, std::size_t end) {
    return {s.parameter, s.rank, begin, s.shard_offset + (begin - s.parameter_offset), end - begin};
  }
  static void check_range(Range r, std::size_t size, const std::string& what) {
    if (r.begin > r.end || r.end > size)
      fail(ErrorKind::invalid_argument, "shard layout: [" + std::to_string(r.begin) + ", " +
                                            std::to_string(r.end) + ") is not a range of the " +
                                            std::to_string(size) + " " + what);
  }
  void check_layer(std::size_t g) const {
    if (g >= table_.layers.size())
      fail(ErrorKind::invalid_argument, "shard layout: layer index " + std::to_string(g) +
                                            " does not exist (there are " +
                                            std::to_string(table_.layers.size()) + ")");
  }

  detail::ParameterTable table_;
  std::string policy_;
  int world_size_ = 1;
  bool equal_slices_ = true;
  std::vector<Range> blocks_;                 // [g * world + r], in shard offsets
  std::vector<std::size_t> block_flat_begin_; // [g * world + r], in the layer's flat buffer
  std::vector<std::size_t> shard_numel_;
  std::vector<std::size_t> owned_numel_;
  std::size_t max_shard_numel_ = 0;
  std::vector<Segment> by_parameter_;
  std::vector<std::size_t> parameter_segment_begin_;
  std::vector<Segment> by_rank_;
  std::vector<std::size_t> rank_segment_begin_;
  std::vector<std::size_t> layer_offset_;
  std::uint64_t hash_ = 0;
};

} // namespace zero
