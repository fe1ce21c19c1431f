#pragma once
// LayerImages: the map between two orders of one layer's elements.
//   - The image: the layer's flat buffer, rank 0's block, then rank 1's, ... with padding. It is
//     what all-gathering the blocks produces and what a reduce-scatter cuts up.
//   - The parameters in order: the layer's parameters end to end, in registration order, with no
//     padding. It is what forward and backward read and write.
// With FlatContiguous the image is the parameters in order followed by padding (in_order()), and
// nothing needs copying. Other layouts (per-parameter chunks, whole parameters on the least-loaded
// rank, a user's partitioner) interleave the two; the map is then a few runs per layer, and
// pack()/unpack() copy along them (converting the element type on the way, as the reducer needs),
// or append_pack_runs()/append_unpack_runs() list those copies once for a run table that kernels
// of any execution space follow (zero/core/run_table.hpp).

#include "zero/core/convert.hpp"
#include "zero/core/error.hpp"
#include "zero/core/run_table.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace zero {

// `length` elements at `flat` in the layer's image are at `ordered` in its parameters in order.
struct ImageRun {
  std::size_t flat = 0;
  std::size_t ordered = 0;
  std::size_t length = 0;
  friend constexpr bool operator==(const ImageRun&, const ImageRun&) = default;
};

class LayerImages {
 public:
  explicit LayerImages(const ShardLayout& layout) : run_begin_(layout.layer_count() + 1, 0) {
    const std::size_t layers = layout.layer_count();
    // Where each parameter starts among its layer's parameters in order.
    std::vector<std::size_t> ordered_begin(layout.parameter_count(), 0);
    for (std::size_t l = 0; l < layers; ++l) {
      std::size_t at = 0;
      for (std::size_t p : layout.layer_parameters(l)) {
        ordered_begin[p] = at;
        at += layout.parameter(p).numel;
      }
    }
    std::vector<std::vector<ImageRun>> by_layer(layers);
    for (int r = 0; r < layout.world_size(); ++r)
      for (const Segment& s : layout.rank_segments(r)) {
        const std::size_t l = layout.layer_of(s.parameter);
        const ImageRun run{layout.flat_offset(s), ordered_begin[s.parameter] + s.parameter_offset,
                           s.length};
        auto& runs = by_layer[l];
        if (!runs.empty() && runs.back().flat + runs.back().length == run.flat &&
            runs.back().ordered + runs.back().length == run.ordered)
          runs.back().length += run.length; // one run across a block boundary
        else
          runs.push_back(run);
      }
    for (std::size_t l = 0; l < layers; ++l) {
      auto& runs = by_layer[l];
      std::sort(runs.begin(), runs.end(),
                [](const ImageRun& a, const ImageRun& b) { return a.flat < b.flat; });
      runs_.insert(runs_.end(), runs.begin(), runs.end());
      run_begin_[l + 1] = runs_.size();
      numel_.push_back(layout.layer(l).numel);
      flat_numel_.push_back(layout.layer(l).flat_numel);
    }
  }

  std::size_t layer_count() const noexcept { return numel_.size(); }
  // Layer l's image runs, ascending in the image.
  std::span<const ImageRun> runs(std::size_t l) const {
    check(l);
    return {runs_.data() + run_begin_[l], run_begin_[l + 1] - run_begin_[l]};
  }
  // The image is the parameters in order, then padding: views of one serve as views of the other.
  bool in_order(std::size_t l) const {
    const auto r = runs(l);
    return r.empty() || (r.size() == 1 && r[0].flat == 0 && r[0].ordered == 0);
  }
  bool all_in_order() const {
    for (std::size_t l = 0; l < layer_count(); ++l)
      if (!in_order(l)) return false;
    return true;
  }

  // f(run) for the runs of layer l clipped to image positions `flat`, ascending.
  template <class F>
  void for_each_run(std::size_t l, Range flat, F&& f) const {
    const auto all = runs(l);
    auto it = std::upper_bound(all.begin(), all.end(), flat.begin,
                               [](std::size_t at, const ImageRun& r) { return at < r.flat; });
    if (it != all.begin() && (it - 1)->flat + (it - 1)->length > flat.begin) --it;
    for (; it != all.end() && it->flat < flat.end; ++it) {
      const std::size_t begin = std::max(flat.begin, it->flat);
      const std::size_t end = std::min(flat.end, it->flat + it->length);
      if (begin < end) f(ImageRun{begin, it->ordered + (begin - it->flat), end - begin});
    }
  }

  // f(run) for the copies that pack the image positions `flat` of layer l from its parameters in
  // order: `from` in the parameters in order, `to` relative to flat.begin, padding as zero runs;
  // ascending in the image.
  template <class F>
  void for_each_pack_run(std::size_t l, Range flat, F&& f) const {
    std::size_t next = flat.begin;
    for_each_run(l, flat, [&](const ImageRun& r) {
      if (r.flat > next) f(CopyRun{CopyRun::zeros, next - flat.begin, r.flat - next});
      f(CopyRun{r.ordered, r.flat - flat.begin, r.length});
      next = r.flat + r.length;
    });
    if (flat.end > next) f(CopyRun{CopyRun::zeros, next - flat.begin, flat.end - next});
  }
  // The packing copies of image positions `flat` into a buffer at `at`, appended to `out` (a run
  // table of a bucket or an image: zero/core/run_table.hpp).
  void append_pack_runs(std::size_t l, Range flat, std::size_t at,
                        std::vector<CopyRun>& out) const {
    for_each_pack_run(l, flat, [&](CopyRun run) {
      run.to += at;
      out.push_back(run);
    });
  }
  // The unpacking copies of image positions `flat`, read from a buffer at `at`, to the parameters
  // in order (shifted by `ordered_at`), appended to `out`; padding is skipped.
  void append_unpack_runs(std::size_t l, Range flat, std::size_t at, std::size_t ordered_at,
                          std::vector<CopyRun>& out) const {
    for_each_run(l, flat, [&](const ImageRun& r) {
      out.push_back({at + (r.flat - flat.begin), ordered_at + r.ordered, r.length});
    });
  }

  // image[i - flat.begin] = ordered[element at image position i] for i in `flat`, converted to To;
  // padding positions become zero.
  template <class From, class To>
  void pack(std::size_t l, const From* ordered, Range flat, To* image) const {
    for_each_pack_run(l, flat, [&](const CopyRun& run) {
      detail::convert_along(std::span(&run, 1), ordered, image);
    });
  }
  // ordered[element at image position i] = image[i - flat.begin] for i in `flat` (padding skipped).
  template <class From, class To>
  void unpack(std::size_t l, const From* image, Range flat, To* ordered) const {
    for_each_run(l, flat, [&](const ImageRun& r) {
      convert_n(image + (r.flat - flat.begin), ordered + r.ordered, r.length);
    });
  }
  // The whole layer: image of flat_numel elements <-> parameters in order of numel elements.
  template <class From, class To>
  void pack(std::size_t l, const From* ordered, To* image) const {
    pack(l, ordered, Range{0, flat_numel_[l]}, image);
  }
  template <class From, class To>
  void unpack(std::size_t l, const From* image, To* ordered) const {
    unpack(l, image, Range{0, flat_numel_[l]}, ordered);
  }

 private:
  void check(std::size_t l) const {
    if (l >= layer_count())
      fail(ErrorKind::invalid_argument, "layer images: no layer index " + std::to_string(l) +
                                            " (there are " + std::to_string(layer_count()) + ")");
  }

  std::vector<ImageRun> runs_;
  std::vector<std::size_t> run_begin_;
  std::vector<std::size_t> numel_, flat_numel_;
};

} // namespace zero
