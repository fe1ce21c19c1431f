#pragma once
// The benchmark's inputs and its check: rank r's element i is a small integer, so every reduction
// has an exact expected value, computed here without communicating.

#include <zero/comm/collective.hpp>
#include <zero/core/dtype.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

namespace bench {

template <class T>
T pattern_value(int rank, std::size_t i) {
  const long v = static_cast<long>((i * 7 + std::size_t(rank) * 3) % 11);
  if constexpr (std::is_same_v<T, std::uint8_t>)
    return static_cast<T>(v);
  else
    return zero::convert<T>(static_cast<float>(v - 5));
}

// Elements [first, first + n) of rank's pattern.
inline void fill_pattern(zero::DType dtype, std::byte* out, std::size_t n, int rank,
                         std::size_t first) {
  zero::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < n; ++i) {
      const T v = pattern_value<T>(rank, first + i);
      std::memcpy(out + i * sizeof(T), &v, sizeof(T));
    }
  });
}

template <class T>
T expected_value(const zero::CollectiveArgs& a, std::size_t i, int rank, int ranks) {
  using A = zero::accumulate_t<T>;
  switch (a.kind) {
  case zero::Collective::all_gather:
    return pattern_value<T>(static_cast<int>(i / a.count), i);
  case zero::Collective::broadcast:
    return pattern_value<T>(a.root, i);
  default:
    break;
  }
  const std::size_t index =
      a.kind == zero::Collective::reduce_scatter ? std::size_t(rank) * a.count + i : i;
  A acc = zero::convert<A>(pattern_value<T>(0, index));
  for (int r = 1; r < ranks; ++r) {
    const A v = zero::convert<A>(pattern_value<T>(r, index));
    if (a.op == zero::ReduceOp::max)
      acc = v > acc ? v : acc;
    else if (a.op == zero::ReduceOp::min)
      acc = v < acc ? v : acc;
    else
      acc = static_cast<A>(acc + v);
  }
  if (a.op == zero::ReduceOp::avg) acc = static_cast<A>(acc / static_cast<A>(ranks));
  return zero::convert<T>(acc);
}

// Relative tolerance per type: NCCL's average pre-multiplies by 1/n, which may differ by an ulp.
template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>)
    return 1e-6;
  else if constexpr (std::is_same_v<T, double>)
    return 1e-12;
  else if constexpr (std::is_same_v<T, zero::half>)
    return 1e-3;
  else if constexpr (std::is_same_v<T, zero::bfloat16>)
    return 1e-2;
  else
    return 0;
}

inline long long count_mismatches(const zero::CollectiveArgs& a, const std::byte* got, int rank,
                                  int ranks) {
  return zero::visit_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    long long wrong = 0;
    const std::size_t n = a.recv_count(ranks);
    for (std::size_t i = 0; i < n; ++i) {
      T value;
      std::memcpy(&value, got + i * sizeof(T), sizeof(T));
      const double have = zero::convert<double>(value);
      const double want = zero::convert<double>(expected_value<T>(a, i, rank, ranks));
      if (!(std::abs(have - want) <= tolerance<T>() * std::abs(want))) ++wrong;
    }
    return wrong;
  });
}

} // namespace bench
