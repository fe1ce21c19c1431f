#pragma once
// zero::bfloat16: the top half of an IEEE binary32, bit-compatible with CUDA's __nv_bfloat16.
// float -> bfloat16 rounds to nearest even (subnormals included, unlike AVX512-BF16's instruction,
// which flushes them) and quietens NaNs; bfloat16 -> float is exact.

#include "zero/core/bit_cast.hpp"
#include "zero/core/platform.hpp"

#include <cstdint>

namespace zero {
namespace detail {
ZERO_HOST_DEVICE constexpr std::uint16_t float_to_bfloat16_bits(float value) noexcept {
  const std::uint32_t x = bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

ZERO_HOST_DEVICE constexpr float bfloat16_bits_to_float(std::uint16_t bits) noexcept {
  return bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
} // namespace detail

struct bfloat16 {
  std::uint16_t bits;

  bfloat16() = default;
  ZERO_HOST_DEVICE explicit constexpr bfloat16(float value) noexcept
      : bits(detail::float_to_bfloat16_bits(value)) {}
  ZERO_HOST_DEVICE explicit constexpr operator float() const noexcept {
    return detail::bfloat16_bits_to_float(bits);
  }

  ZERO_HOST_DEVICE static constexpr bfloat16 from_bits(std::uint16_t raw) noexcept {
    bfloat16 b{};
    b.bits = raw;
    return b;
  }
};

static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);

} // namespace zero
