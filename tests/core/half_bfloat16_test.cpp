// zero::half and zero::bfloat16 against references nobody here wrote:
// - half: the processor's F16C conversion instructions (vcvtps2ph / vcvtph2ps), IEEE 754
//   round-to-nearest-even in silicon;
// - bfloat16: an independent rule, "the nearer of the two neighbouring bfloat16 values, ties to the
//   even one", evaluated in double.
// Exhaustive over all 65536 bit patterns of each type, over every rounding boundary between two
// neighbours (the exact midpoint and one float ulp either side), and over random floats. The bulk
// convert_n paths (SIMD) must agree with the scalar conversions bit for bit.

#include <zero/core/bfloat16.hpp>
#include <zero/core/convert.hpp>
#include <zero/core/half.hpp>

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;

std::uint16_t hardware_half(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
float hardware_float(std::uint16_t h) {
  return _cvtsh_ss(h);
}

std::uint32_t bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}
float from_bits(std::uint32_t b) {
  return std::bit_cast<float>(b);
}

// The reference rounding of a float to bfloat16, by distance to the two neighbours.
std::uint16_t reference_bfloat16(float f) {
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits(f) >> 16) | 0x40u);
  const std::uint32_t x = bits(f);
  const std::uint16_t toward_zero = static_cast<std::uint16_t>(x >> 16);
  if ((x & 0xffffu) == 0) return toward_zero;
  const double lower = std::fabs(double(from_bits(std::uint32_t(toward_zero) << 16)));
  const std::uint16_t away = static_cast<std::uint16_t>(toward_zero + 1);
  // Past the largest finite value the next neighbour is 2^128 (infinity when chosen).
  const double upper = (away & 0x7fffu) == 0x7f80u
                           ? std::ldexp(1.0, 128)
                           : std::fabs(double(from_bits(std::uint32_t(away) << 16)));
  const double magnitude = std::fabs(double(f));
  if (magnitude - lower < upper - magnitude) return toward_zero;
  if (magnitude - lower > upper - magnitude) return away;
  return (toward_zero & 1u) ? away : toward_zero;
}

// Floats around every boundary between two neighbouring 16-bit values with `shift` low bits
// dropped: the exact midpoint, one ulp below and above, and the values themselves.
std::vector<float> boundary_floats(bool half_format) {
  std::vector<float> out;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float value = half_format ? hardware_float(std::uint16_t(h)) : from_bits(h << 16);
    if (!std::isfinite(value)) continue;
    const float next =
        half_format ? hardware_float(std::uint16_t(h + 1)) : from_bits((h + 1) << 16);
    out.push_back(value);
    if (!std::isfinite(next) || std::signbit(next) != std::signbit(value)) continue;
    const float mid = static_cast<float>((double(value) + double(next)) / 2);
    out.push_back(mid);
    out.push_back(std::nextafter(mid, 0.0f));
    out.push_back(
        std::nextafter(mid, std::numeric_limits<float>::infinity() * (value < 0 ? -1 : 1)));
  }
  // Overflow thresholds and the tiniest values.
  for (float f :
       {65504.0f, 65519.996f, 65520.0f, 65536.0f, 3.4028235e38f, 1e-45f, 2.98e-8f, 2.99e-8f,
        5.96e-8f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    out.push_back(f);
    out.push_back(-f);
  }
  return out;
}

std::vector<float> random_floats(std::size_t n) {
  std::mt19937 rng(12345);
  std::vector<float> out(n);
  for (auto& f : out)
    f = from_bits(static_cast<std::uint32_t>(rng()));
  return out;
}

TEST(Half, EveryBitPatternConvertsToFloatLikeHardware) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float mine = static_cast<float>(half::from_bits(std::uint16_t(h)));
    const float ref = hardware_float(std::uint16_t(h));
    ASSERT_EQ(bits(mine), bits(ref)) << "half bits 0x" << std::hex << h;
  }
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const half x = half::from_bits(std::uint16_t(h));
    const half back(static_cast<float>(x));
    if (((h >> 10) & 0x1fu) == 0x1fu && (h & 0x3ffu) != 0) { // NaN: stays NaN, made quiet
      EXPECT_EQ(back.bits, h | 0x200u) << std::hex << h;
      continue;
    }
    ASSERT_EQ(back.bits, h) << "half bits 0x" << std::hex << h;
  }
}

TEST(Half, RoundsEveryBoundaryLikeHardware) {
  for (float f : boundary_floats(true))
    ASSERT_EQ(half(f).bits, hardware_half(f)) << f;
}

TEST(Half, RoundsRandomFloatsLikeHardware) {
  for (float f : random_floats(2'000'000))
    ASSERT_EQ(half(f).bits, hardware_half(f)) << std::hex << bits(f);
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(half(std::numeric_limits<float>::infinity()).bits, 0x7c00u);
  EXPECT_EQ(half(-std::numeric_limits<float>::infinity()).bits, 0xfc00u);
  EXPECT_EQ(half(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(half(65520.0f).bits, 0x7c00u) << "the tie above the largest half rounds to infinity";
  EXPECT_EQ(half(-0.0f).bits, 0x8000u);
  EXPECT_EQ(half(5.9604645e-8f).bits, 0x0001u) << "smallest subnormal";
  EXPECT_EQ(half(2.9802322e-8f).bits, 0x0000u) << "half the smallest subnormal ties to even (zero)";
  EXPECT_TRUE(std::isnan(static_cast<float>(half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Bfloat16, EveryBitPatternRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const bfloat16 x = bfloat16::from_bits(std::uint16_t(b));
    const float f = static_cast<float>(x);
    ASSERT_EQ(bits(f), b << 16);
    const bfloat16 back(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back.bits, b | 0x40u);
      continue;
    }
    ASSERT_EQ(back.bits, b) << std::hex << b;
  }
}

TEST(Bfloat16, RoundsEveryBoundaryLikeTheReference) {
  for (float f : boundary_floats(false))
    ASSERT_EQ(bfloat16(f).bits, reference_bfloat16(f)) << f;
}

TEST(Bfloat16, RoundsRandomFloatsLikeTheReference) {
  for (float f : random_floats(2'000'000))
    ASSERT_EQ(bfloat16(f).bits, reference_bfloat16(f)) << std::hex << bits(f);
}

TEST(Bfloat16, KeepsSubnormals) {
  const float tiny = std::numeric_limits<float>::denorm_min() * 3;
  EXPECT_EQ(bfloat16(tiny).bits, 0u) << "3 * 2^-149 rounds to 0 (bfloat16 keeps 7 mantissa bits)";
  const float small_subnormal = from_bits(0x00400000u); // 2^-127, a bfloat16 subnormal
  EXPECT_EQ(bfloat16(small_subnormal).bits, 0x0040u) << "not flushed to zero";
}

template <class T>
void expect_bulk_matches_scalar(const std::vector<float>& floats) {
  std::vector<T> bulk(floats.size());
  zero::convert_n(floats.data(), bulk.data(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i)
    ASSERT_EQ(bulk[i].bits, T(floats[i]).bits) << floats[i];
  std::vector<float> back(floats.size());
  zero::convert_n(bulk.data(), back.data(), bulk.size());
  for (std::size_t i = 0; i < floats.size(); ++i)
    ASSERT_EQ(bits(back[i]), bits(static_cast<float>(bulk[i]))) << i;
}

TEST(BulkConversion, MatchesScalarForHalf) {
  auto floats = boundary_floats(true);
  auto random = random_floats(100'003);
  floats.insert(floats.end(), random.begin(), random.end());
  expect_bulk_matches_scalar<half>(floats);
}

TEST(BulkConversion, MatchesScalarForBfloat16) {
  auto floats = boundary_floats(false);
  auto random = random_floats(100'003);
  floats.insert(floats.end(), random.begin(), random.end());
  expect_bulk_matches_scalar<bfloat16>(floats);
}

TEST(BulkConversion, EveryHalfPatternWidensLikeScalar) {
  std::vector<half> all(0x10000);
  for (std::uint32_t h = 0; h < 0x10000u; ++h)
    all[h] = half::from_bits(std::uint16_t(h));
  std::vector<float> wide(all.size());
  zero::convert_n(all.data(), wide.data(), all.size());
  for (std::uint32_t h = 0; h < 0x10000u; ++h)
    ASSERT_EQ(bits(wide[h]), bits(static_cast<float>(all[h]))) << h;
}

TEST(Convert, GoesThroughFloatForLowPrecision) {
  EXPECT_EQ(zero::convert<double>(half(1.5f)), 1.5);
  EXPECT_EQ(zero::convert<bfloat16>(half(2.0f)).bits, bfloat16(2.0f).bits);
  EXPECT_EQ(zero::convert<std::int32_t>(bfloat16(-3.0f)), -3);
  EXPECT_EQ(zero::convert<half>(7).bits, half(7.0f).bits);
}

} // namespace
