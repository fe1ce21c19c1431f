#pragma once
// A partitioner written in user code: small parameters (biases, norms) stay whole on the
// least-loaded rank, so an optimizer step touches them without any split bookkeeping, while large
// ones (embeddings, projections) are cut into one even chunk per rank, as PerParameter does.
// Blocks come out unequal, so it declares equal_slices = false.

#include <zero/shard/layout_builder.hpp>
#include <zero/shard/parameter.hpp>
#include <zero/shard/shard_layout.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

struct KeepSmallWhole {
  static constexpr bool equal_slices = false;
  std::size_t threshold = 4096; // parameters with fewer elements stay whole

  std::string describe() const {
    return "keep_small_whole(threshold=" + std::to_string(threshold) + ")";
  }

  zero::ShardLayout partition(std::span<const zero::ParameterSpec> params, int world_size) const {
    zero::LayoutBuilder b(params, world_size, {.policy = describe(), .equal_slices = false});
    const auto ranks = static_cast<std::size_t>(world_size);
    std::vector<std::size_t> load(ranks, 0);
    for (std::size_t g = 0; g < b.layer_count(); ++g) {
      b.begin_layer(g);
      for (std::size_t p : b.layer_parameters(g)) {
        const std::size_t numel = b.parameter(p).numel;
        if (numel < threshold) {
          const auto least =
              static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
          b.place(p, static_cast<int>(least), 0, numel);
          load[least] += numel;
          continue;
        }
        const std::size_t chunk = (numel + ranks - 1) / ranks;
        for (std::size_t r = 0; r < ranks; ++r) {
          const std::size_t begin = std::min(numel, r * chunk);
          const std::size_t length = std::min(chunk, numel - begin);
          b.place(p, static_cast<int>(r), begin, length);
          load[r] += length;
        }
      }
    }
    return std::move(b).finish();
  }
};
