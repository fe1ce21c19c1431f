#pragma once
// The rule of a split master weight (optim/split_master.hpp states it in full): the fp32 master m
// as the compute weight w = rne(m) plus a residual r = rne((m - w) / u), u = 2^(E - F - b), and
// back as m = w + r * u. Scalar functions usable on the host and in CUDA device code, so that the
// host's vector lanes, the CUDA kernels and the scalar tails all compute these same bits.

#include "zero/core/bfloat16.hpp"
#include "zero/core/bit_cast.hpp"
#include "zero/core/half.hpp"
#include "zero/core/platform.hpp"

#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>

namespace zero {

// The compute types a master can be split over, and the residuals' element types.
template <class T>
concept SplitComputeType = std::same_as<T, bfloat16> || std::same_as<T, half>;
template <class R>
concept SplitResidual = std::same_as<R, std::int8_t> || std::same_as<R, std::int16_t>;

namespace detail {

template <class T>
struct SplitFormat;
template <>
struct SplitFormat<bfloat16> {
  static constexpr int fraction_bits = 7;
  static constexpr std::uint32_t min_biased_exponent = 1; // 2^-126, as fp32
};
template <>
struct SplitFormat<half> {
  static constexpr int fraction_bits = 10;
  static constexpr std::uint32_t min_biased_exponent = 127 - 14; // 2^-14
};

// The constants of one split: (compute type, residual bits).
template <SplitComputeType T, SplitResidual R>
struct SplitConstants {
  static constexpr int shift = SplitFormat<T>::fraction_bits + 8 * static_cast<int>(sizeof(R));
  static constexpr float scale_down = 1.0f / static_cast<float>(std::uint32_t{1} << shift);
  static constexpr float scale_up = static_cast<float>(std::uint32_t{1} << shift);
  static constexpr float largest = static_cast<float>((1 << (8 * sizeof(R) - 1)) - 1);
  static constexpr std::uint32_t min_exponent = SplitFormat<T>::min_biased_exponent;
  // Huge weights (2^127 and up) use 2^126's units, so that 2^-E stays a normal float.
  static constexpr std::uint32_t max_exponent = 253;
};

// w's biased exponent, kept within [min_exponent, max_exponent].
template <SplitComputeType T, SplitResidual R>
ZERO_HOST_DEVICE inline std::uint32_t split_exponent(float w) noexcept {
  using C = SplitConstants<T, R>;
  const std::uint32_t e = (bit_cast<std::uint32_t>(w) >> 23) & 0xffu;
  return e < C::min_exponent ? C::min_exponent : (e > C::max_exponent ? C::max_exponent : e);
}

} // namespace detail

// The master weight that w and r stand for.
template <SplitComputeType T, SplitResidual R>
ZERO_HOST_DEVICE inline float reconstruct_master(T w, R r) noexcept {
  using C = detail::SplitConstants<T, R>;
  const float weight = static_cast<float>(w);
  const float power = detail::bit_cast<float>(detail::split_exponent<T, R>(weight) << 23); // 2^E
  // No residual: w itself, a -0 included (-0 + 0 would be +0).
  return r == 0 ? weight : weight + (static_cast<float>(r) * C::scale_down) * power;
}

// Splits master m into its compute weight and residual.
template <SplitComputeType T, SplitResidual R>
ZERO_HOST_DEVICE inline void split_master(float m, T& w, R& r) noexcept {
  using C = detail::SplitConstants<T, R>;
  w = T(m);
  const float weight = static_cast<float>(w);
  const float inverse = // 2^-E
      detail::bit_cast<float>((254u - detail::split_exponent<T, R>(weight)) << 23);
  float units = ((m - weight) * inverse) * C::scale_up;
  // As the vector lanes' max and min: a NaN (a non-finite master) becomes -largest.
  units = units > -C::largest ? units : -C::largest;
  units = units < C::largest ? units : C::largest;
#if ZERO_DEVICE_CODE
  r = static_cast<R>(__float2int_rn(units));
#else
  r = static_cast<R>(std::nearbyint(units)); // the default rounding: to nearest even
#endif
}

// A rank's split masters of one range, in memory of `Space`: the compute copy (read and written)
// and the residuals.
template <SplitComputeType T, SplitResidual R, MemorySpace Space = host>
struct SplitMasterView {
  View<T, Space> weights;
  View<R, Space> residuals;
  std::size_t size() const noexcept { return weights.size(); }
};

} // namespace zero
