#pragma once
// WholeParameterGreedy: the layout of PyTorch's ZeroRedundancyOptimizer. Parameters are never
// split: within each layer, largest first (ties in registration order), each goes to the rank
// with the fewest elements so far (ties to the lowest rank), counting all layers laid out before,
// as torch.distributed.optim.ZeroRedundancyOptimizer does across its parameter layers. Within a
// rank's block the parameters keep registration order. Shards are unequal, so this layout cannot
// back a reduce-scatter of equal blocks (equal_slices is false).

#include "zero/shard/layout_builder.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct WholeParameterGreedy {
  static constexpr bool equal_slices = false;

  std::string describe() const { return "whole_parameter_greedy"; }

  ShardLayout partition(std::span<const ParameterSpec> params, int world_size) const {
    LayoutBuilder b(params, world_size, {.policy = describe(), .equal_slices = false});
    // (load, rank), smallest first: the least-loaded rank, lowest rank on ties, in log(world).
    using Load = std::pair<std::size_t, int>;
    std::priority_queue<Load, std::vector<Load>, std::greater<>> loads;
    for (int r = 0; r < world_size; ++r)
      loads.push({0, r});
    std::vector<int> owner(b.parameter_count(), 0);
    std::vector<std::size_t> order;
    for (std::size_t g = 0; g < b.layer_count(); ++g) {
      const auto members = b.layer_parameters(g);
      order.assign(members.begin(), members.end());
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
        return b.parameter(x).numel > b.parameter(y).numel;
      });
      for (std::size_t p : order) {
        auto [load, rank] = loads.top();
        loads.pop();
        owner[p] = rank;
        loads.push({load + b.parameter(p).numel, rank});
      }
      b.begin_layer(g);
      for (std::size_t p : members)
        b.place(p, owner[p], 0, b.parameter(p).numel);
    }
    return std::move(b).finish();
  }
};

} // namespace zero
