#pragma once
// Element-wise reduction of several host sources into one destination, in a fixed order
// (source 0, then 1, ...), accumulating half and bfloat16 in float and rounding once. The fixed
// order is what makes zero's shared-memory collectives deterministic: the same inputs give the
// same bits whatever the chunking.

#include "zero/comm/reduce_op.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>

namespace zero::detail {

template <ReduceOp Op, class A>
inline A combine(A a, A b) noexcept {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) {
    if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
      using U = std::make_unsigned_t<A>; // wrap around like NCCL and MPI, without UB
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return static_cast<A>(a + b);
    }
  } else if constexpr (Op == ReduceOp::max) {
    return (b > a || b != b) ? b : a; // a NaN wins: a NaN gradient norm must not vanish
  } else {
    return (b < a || b != b) ? b : a;
  }
}

template <ReduceOp Op, Element T>
void reduce_sources_impl(T* dst, std::span<const T* const> sources, std::size_t count,
                         int ranks) noexcept {
  using A = accumulate_t<T>;
  constexpr std::size_t tile = 1024;
  alignas(64) A acc[tile];
  alignas(64) A next[tile];
  for (std::size_t base = 0; base < count; base += tile) {
    const std::size_t m = std::min(tile, count - base);
    convert_n(sources[0] + base, acc, m);
    for (std::size_t s = 1; s < sources.size(); ++s) {
      if constexpr (std::is_same_v<A, T>) {
        const T* src = sources[s] + base;
        for (std::size_t i = 0; i < m; ++i)
          acc[i] = combine<Op>(acc[i], src[i]);
      } else {
        convert_n(sources[s] + base, next, m);
        for (std::size_t i = 0; i < m; ++i)
          acc[i] = combine<Op>(acc[i], next[i]);
      }
    }
    if constexpr (Op == ReduceOp::avg) {
      const A divisor = static_cast<A>(ranks);
      for (std::size_t i = 0; i < m; ++i)
        acc[i] = static_cast<A>(acc[i] / divisor);
    }
    convert_n(acc, dst + base, m);
  }
}

// dst[i] = op(sources[0][i], sources[1][i], ...); `ranks` divides for avg. dst may alias a source.
template <Element T>
void reduce_sources(T* dst, std::span<const T* const> sources, std::size_t count, ReduceOp op,
                    int ranks) noexcept {
  switch (op) {
  case ReduceOp::sum:
    return reduce_sources_impl<ReduceOp::sum>(dst, sources, count, ranks);
  case ReduceOp::avg:
    return reduce_sources_impl<ReduceOp::avg>(dst, sources, count, ranks);
  case ReduceOp::max:
    return reduce_sources_impl<ReduceOp::max>(dst, sources, count, ranks);
  case ReduceOp::min:
    return reduce_sources_impl<ReduceOp::min>(dst, sources, count, ranks);
  }
}

} // namespace zero::detail
