#pragma once
// zero::half: IEEE 754 binary16 storage, bit-compatible with CUDA's __half. Conversions round to
// nearest even and keep infinities, NaNs (quietened) and subnormals exact; they are written once
// for host and device, and use the hardware instruction in device code.

#include "zero/core/bit_cast.hpp"
#include "zero/core/platform.hpp"

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace zero {
namespace detail {

ZERO_HOST_DEVICE constexpr std::uint16_t float_to_half_bits(float value) noexcept {
  const std::uint32_t x = bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) { // Inf stays Inf; NaN keeps its top payload bits, made quiet
    if (magnitude == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u; // >= 65520 rounds (to even) past 65504
  if (magnitude < 0x38800000u) {                       // below 2^-14: a half subnormal or zero
    const std::uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return sign; // below 2^-25: rounds to zero
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent; // value in units of 2^-24 is mantissa >> shift
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    const bool round_up = rest > halfway || (rest == halfway && (kept & 1u));
    return static_cast<std::uint16_t>(sign | (kept + (round_up ? 1u : 0u)));
  }
  const std::uint32_t rebiased = magnitude - 0x38000000u; // exponent bias 127 -> 15
  return static_cast<std::uint16_t>(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
}

ZERO_HOST_DEVICE constexpr float half_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) { // Inf or NaN; a signalling NaN becomes quiet, as in hardware
    const std::uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return bit_cast<float>(sign);
    std::uint32_t float_exponent = 113; // 2^-14, the half subnormal scale; normalise below it
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --float_exponent;
    }
    return bit_cast<float>(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
} // namespace detail

struct half {
  std::uint16_t bits;

  half() = default;
  ZERO_HOST_DEVICE explicit constexpr half(float value) noexcept : bits(to_bits(value)) {}
  ZERO_HOST_DEVICE explicit constexpr operator float() const noexcept { return to_float(bits); }

  ZERO_HOST_DEVICE static constexpr half from_bits(std::uint16_t raw) noexcept {
    half h{};
    h.bits = raw;
    return h;
  }

 private:
  ZERO_HOST_DEVICE static constexpr std::uint16_t to_bits(float value) noexcept {
#if ZERO_DEVICE_CODE
    return __half_as_ushort(__float2half_rn(value));
#else
    return detail::float_to_half_bits(value);
#endif
  }
  ZERO_HOST_DEVICE static constexpr float to_float(std::uint16_t raw) noexcept {
#if ZERO_DEVICE_CODE
    return __half2float(__ushort_as_half(raw));
#else
    return detail::half_bits_to_float(raw);
#endif
  }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2);

} // namespace zero
