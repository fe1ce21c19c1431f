#pragma once
// How a BucketedReducer reduces a bucket: all-reduce (every rank keeps the full average, ZeRO
// stage 0) or reduce-scatter (each rank keeps the part it owns, stages 1-3).

#include "zero/comm/collective.hpp"

#include <concepts>

namespace zero {

struct AllReduceGradients {
  static constexpr Collective collective = Collective::all_reduce;
};

struct ReduceScatterGradients {
  static constexpr Collective collective = Collective::reduce_scatter;
};

template <class S>
concept ReduceStrategy = requires {
  { S::collective } -> std::convertible_to<Collective>;
  requires S::collective == Collective::all_reduce || S::collective == Collective::reduce_scatter;
};

} // namespace zero
