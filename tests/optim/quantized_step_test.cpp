// 8-bit moments (optim/dynamic_map.hpp, quantized_moments.hpp, quantized_step.hpp): the dynamic
// map against bitsandbytes' definition, the quantizer's round trip and error, and the fused 8-bit
// Adam step against the fp32 step and across block-aligned splits.

#include "zero/optim/adam.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/quantized_step.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace {

using zero::DynamicMap;
using zero::quantized_moment_block;

// Distance in units in the last place between two floats of one sign.
std::int64_t ulps(float a, float b) {
  return std::abs(std::int64_t{std::bit_cast<std::int32_t>(a)} -
                  std::int64_t{std::bit_cast<std::int32_t>(b)});
}

TEST(DynamicMap, FollowsBitsandbytesDefinition) {
  // Values of bitsandbytes' create_dynamic_map (functional.py) as its definition computes them
  // with PyTorch in float32 arithmetic (torch.linspace, the midpoints, the power of ten): zero's
  // are computed in double and rounded once, so they may differ by a unit or two in the last place.
  const std::vector<std::pair<int, float>> signed_reference{
      {0, -0.992968738079071f},      {1, -0.9789062142372131f},
      {64, -0.09859374910593033f},   {127, 0.0f},
      {128, 5.500000384017767e-07f}, {129, 3.250000190746505e-06f},
      {130, 7.749999895168003e-06f}, {191, 0.10703125596046448f},
      {254, 0.992968738079071f},     {255, 1.0f}};
  const std::vector<std::pair<int, float>> unsigned_reference{{0, 0.0f},
                                                              {1, 3.2500003044333425e-07f},
                                                              {2, 7.749999895168003e-07f},
                                                              {3, 2.1249998098937795e-06f},
                                                              {64, 0.012109375558793545f},
                                                              {128, 0.11054687201976776f},
                                                              {200, 0.6167968511581421f},
                                                              {253, 0.9894531965255737f},
                                                              {254, 0.9964843988418579f},
                                                              {255, 1.0f}};
  for (const auto& [map, reference] : {std::pair{&DynamicMap::signed_map(), &signed_reference},
                                       std::pair{&DynamicMap::unsigned_map(), &unsigned_reference}})
    for (const auto& [code, value] : *reference)
      EXPECT_LE(ulps((*map)[std::uint8_t(code)], value), 2)
          << (map->is_signed() ? "signed" : "unsigned") << " code " << code << ": "
          << (*map)[std::uint8_t(code)] << " against " << value;
  // Ascending, distinct; the signed map symmetric but for 1 (no -1, as bitsandbytes').
  for (const DynamicMap* map : {&DynamicMap::signed_map(), &DynamicMap::unsigned_map()})
    EXPECT_TRUE(std::is_sorted(map->values().begin(), map->values().end(),
                               [](float a, float b) { return a <= b; }));
  const DynamicMap& s = DynamicMap::signed_map();
  for (int k = 0; k < 127; ++k)
    EXPECT_EQ(s[std::uint8_t(k)], -s[std::uint8_t(254 - k)]) << k;
}

TEST(DynamicMap, EveryValueIsItsOwnCodeAndOthersGoToTheNearest) {
  for (const DynamicMap* map : {&DynamicMap::signed_map(), &DynamicMap::unsigned_map()}) {
    for (int c = 0; c < 256; ++c)
      EXPECT_EQ(map->nearest((*map)[std::uint8_t(c)]), c);
    // Around every decision boundary: below it the lower code, on it the lower (ties to the
    // smaller value), above it the upper. Through nearest() and through quantize(), whose lanes
    // take eight at a time, for the same codes.
    std::vector<float> probes; // the special values first: through the lanes, not the tail
    for (float p :
         {0.0f, -0.0f, 1.0f, 1.5f, -1.5f, 1e-30f, -1e-30f, 3e38f, -3e38f,
          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
      probes.push_back(p);
    for (int c = 0; c + 1 < 256; ++c) {
      const float b = map->boundary(std::uint8_t(c));
      const float low = (*map)[std::uint8_t(c)], high = (*map)[std::uint8_t(c + 1)];
      ASSERT_LT(low, b) << c;
      ASSERT_LT(b, high) << c;
      // The boundary is the midpoint of the two values, within a rounding.
      EXPECT_NEAR(b, low + (high - low) / 2, 1e-6 * std::fabs(high)) << c;
      const float below = std::nextafter(b, -2.0f), above = std::nextafter(b, 2.0f);
      EXPECT_EQ(map->nearest(below), c);
      EXPECT_EQ(map->nearest(b), c) << "a tie goes to the smaller value";
      EXPECT_EQ(map->nearest(above), c + 1);
      probes.insert(probes.end(), {below, b, above});
    }
    std::vector<std::uint8_t> lanes(probes.size());
    map->quantize(probes.data(), probes.size(), 1.0f, lanes.data());
    for (std::size_t i = 0; i < probes.size(); ++i)
      ASSERT_EQ(lanes[i], map->nearest(probes[i])) << probes[i];
    std::mt19937 random(3);
    std::uniform_real_distribution<float> unit(map->is_signed() ? -1.0f : 0.0f, 1.0f);
    for (int i = 0; i < 20000; ++i) {
      const float x = std::ldexp(unit(random), -int(random() % 24)); // every decade
      const float chosen = (*map)[map->nearest(x)];
      for (float v : map->values()) // the nearest, but for the rounding of a boundary
        ASSERT_LE(std::fabs(chosen - x), std::fabs(v - x) + 1e-7f * std::fabs(x)) << x;
    }
  }
}

// n values as gradients and Adam's moments hold them: the first signed, the second positive;
// each element of its own size, spread over two decades.
std::vector<float> moment(std::size_t n, bool positive, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decades(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    x = normal(random) * std::pow(10.0f, decades(random)) * 1e-3f;
    if (positive) x = x * x;
  }
  return v;
}

// A block's scale: the largest magnitude, NaNs ignored, on the lanes and in the tail alike.
TEST(QuantizedMoments, TheScaleIsTheLargestMagnitudeIgnoringNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n = 0; n <= 70; ++n) {
    for (std::size_t at = 0; at < std::max<std::size_t>(n, 1); at += 5) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = (i % 3 == 0 ? -1.0f : 1.0f) * float(i % 11) / 16;
      if (at < n) {
        v[at] = -7.5f; // the largest, negative (unless the NaN lands on it)
        v[n - 1 - at] = nan;
      }
      float expected = 0.0f;
      for (float x : v)
        if (!std::isnan(x)) expected = std::max(expected, std::fabs(x));
      EXPECT_EQ(zero::absolute_maximum(v.data(), n), expected) << n << " " << at;
    }
  }
}

TEST(QuantizedMoments, RoundTripIsExactOnceQuantizedAndCloseBefore) {
  for (bool positive : {false, true}) {
    const DynamicMap& map = positive ? DynamicMap::unsigned_map() : DynamicMap::signed_map();
    const std::size_t n = 3 * quantized_moment_block + 100; // a partial last block
    const std::vector<float> values = moment(n, positive, 7);
    std::vector<std::uint8_t> codes(n), again(n);
    std::vector<float> scales(zero::quantized_blocks(n)), scales_again(scales.size());
    zero::quantize(map, values, {codes, scales});
    std::vector<float> back(n);
    zero::dequantize(map, {codes, scales}, back);
    // Each value within half the map's gap around it, relative to its block's maximum.
    for (std::size_t i = 0; i < n; ++i) {
      const float scale = scales[i / quantized_moment_block];
      const float x = values[i] / scale;
      const std::uint8_t c = codes[i];
      const float below = c > 0 ? map[std::uint8_t(c - 1)] : map[c];
      const float above = c < 255 ? map[std::uint8_t(c + 1)] : map[c];
      EXPECT_LE(std::fabs(back[i] / scale - x),
                std::max(map[c] - below, above - map[c]) / 2 * 1.0001f + 1e-7f)
          << i;
    }
    // requantize() gives back every code and scale, those blocks included.
    zero::requantize(map, back, {again, scales_again});
    EXPECT_EQ(again, codes);
    EXPECT_EQ(scales_again, scales);
    // Quantized again afresh, the bytes stay, but for one case: the signed map has no -1 (as
    // bitsandbytes'), so a block whose largest magnitude is negative comes back with a scale
    // 0.993 times its own, and its codes move with it.
    zero::quantize(map, back, {again, scales_again});
    for (std::size_t b = 0; b < scales.size(); ++b) {
      const std::size_t begin = b * quantized_moment_block;
      const std::size_t end = std::min(n, begin + quantized_moment_block);
      const auto largest = *std::max_element(
          values.begin() + std::ptrdiff_t(begin), values.begin() + std::ptrdiff_t(end),
          [](float x, float y) { return std::fabs(x) < std::fabs(y); });
      if (largest < 0) {
        EXPECT_EQ(scales_again[b], -map[0] * scales[b]) << "block " << b;
        continue;
      }
      EXPECT_EQ(scales_again[b], scales[b]) << "block " << b;
      EXPECT_TRUE(std::equal(codes.begin() + std::ptrdiff_t(begin),
                             codes.begin() + std::ptrdiff_t(end),
                             again.begin() + std::ptrdiff_t(begin)))
          << "block " << b;
    }
  }
}

// Every code in every position of the lanes (64 at a time with AVX-512 VBMI, 8 with AVX2, one in
// the remainder) dequantizes to map[code] x scale, the scalar product, bit for bit.
TEST(DynamicMap, DequantizationIsTheTablesValueTimesTheScale) {
  for (bool positive : {false, true}) {
    const DynamicMap& map = positive ? DynamicMap::unsigned_map() : DynamicMap::signed_map();
    for (const float scale : {1.0f, 3.7e-5f, 1.0f / 3.0f}) {
      const std::size_t n = 4 * 256 + 64 + 8 + 5;
      std::vector<std::uint8_t> codes(n);
      for (std::size_t i = 0; i < n; ++i) // each code at many offsets within a lane group
        codes[i] = static_cast<std::uint8_t>((i * 37 + i / 256) % 256);
      std::vector<float> values(n);
      map.dequantize(codes.data(), n, scale, values.data());
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(values[i]),
                  std::bit_cast<std::uint32_t>(map[codes[i]] * scale))
            << (positive ? "unsigned" : "signed") << " map, scale " << scale << ", element " << i
            << ", code " << int(codes[i]);
    }
  }
}

TEST(QuantizedMoments, ABlockOfSubnormalsIsKeptAsZeros) {
  // 1 / absmax would overflow: the block is stored as zeros instead of as +-absmax and NaN.
  const std::vector<float> tiny{1e-39f, 0.0f, -5e-40f, 0.0f};
  for (const DynamicMap* map : {&DynamicMap::signed_map(), &DynamicMap::unsigned_map()}) {
    std::vector<std::uint8_t> codes(tiny.size());
    std::vector<float> scales(1), back(tiny.size(), 1.0f);
    zero::quantize(*map, tiny, {codes, scales});
    zero::dequantize(*map, {codes, scales}, back);
    EXPECT_EQ(scales[0], 0.0f);
    EXPECT_EQ(back, std::vector<float>(tiny.size(), 0.0f));
  }
}

TEST(QuantizedMoments, SizesAreChecked) {
  std::vector<std::uint8_t> codes(quantized_moment_block + 1);
  std::vector<float> scales(1), values(codes.size());
  EXPECT_THROW(zero::quantize(DynamicMap::signed_map(), values, {codes, scales}), zero::Error);
}

struct AdamRun {
  std::vector<float> master;
  std::vector<std::uint8_t> m_codes, v_codes;
  std::vector<float> m_scales, v_scales;
  explicit AdamRun(std::size_t n)
      : master(moment(n, false, 11)), m_codes(n, 127), v_codes(n, 0),
        m_scales(zero::quantized_blocks(n), 0.0f), v_scales(m_scales.size(), 0.0f) {}
  zero::QuantizedMoment m(std::size_t begin, std::size_t n) {
    return {zero::View<std::uint8_t>(m_codes).subview(begin, n),
            zero::View<float>(m_scales).subview(begin / quantized_moment_block,
                                                zero::quantized_blocks(n))};
  }
  zero::QuantizedMoment v(std::size_t begin, std::size_t n) {
    return {zero::View<std::uint8_t>(v_codes).subview(begin, n),
            zero::View<float>(v_scales).subview(begin / quantized_moment_block,
                                                zero::quantized_blocks(n))};
  }
};

TEST(QuantizedStep, FirstStepIsTheFp32StepAndLaterOnesStayClose) {
  const std::size_t n = 2 * quantized_moment_block + 517;
  const zero::AdamW adam({.lr = 1e-3, .weight_decay = 0.01});
  AdamRun eight(n);
  std::vector<float> master = eight.master, m(n, 0.0f), v(n, 0.0f);
  for (int step = 1; step <= 50; ++step) {
    const std::vector<float> grad = moment(n, false, 100 + unsigned(step));
    const zero::AdamUpdate u = adam.update_for_step(step);
    zero::quantized_fused_step(u, zero::View<float>(eight.master), eight.m(0, n), eight.v(0, n),
                               zero::View<const float>(grad));
    zero::fused_step(u, zero::View<float>(master), {zero::View<float>(m), zero::View<float>(v)},
                     zero::View<const float>(grad));
    if (step == 1) { // zero moments are exact in 8 bits: the same update, bit for bit
      ASSERT_EQ(eight.master, master);
    }
  }
  // After 50 steps the weights have moved by about 50 lr; the 8-bit moments keep them within a
  // small part of that.
  double moved = 0, apart = 0;
  const AdamRun start(n);
  for (std::size_t i = 0; i < n; ++i) {
    moved += std::fabs(master[i] - start.master[i]);
    apart += std::fabs(eight.master[i] - master[i]);
  }
  EXPECT_GT(moved / double(n), 1e-3);
  EXPECT_LT(apart / moved, 0.05) << "mean distance from the fp32 run, against the distance moved";
}

TEST(QuantizedStep, BlockAlignedShardsGiveTheSameBytesAsTheWhole) {
  const std::size_t n = 3 * quantized_moment_block + 9;
  const zero::Adam adam({.lr = 1e-2});
  AdamRun whole(n), split(n);
  const std::size_t cut = quantized_moment_block; // a shard boundary on a block boundary
  std::vector<zero::half> copy_whole(n), copy_split(n);
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> grad = moment(n, false, 200 + unsigned(step));
    const zero::AdamUpdate u = adam.update_for_step(step);
    zero::quantized_fused_step(u, zero::View<float>(whole.master), whole.m(0, n), whole.v(0, n),
                               zero::View<const float>(grad), 0.5f,
                               zero::View<zero::half>(copy_whole));
    for (const auto& [begin, size] : {std::pair{std::size_t{0}, cut}, std::pair{cut, n - cut}})
      zero::quantized_fused_step(u, zero::View<float>(split.master).subview(begin, size),
                                 split.m(begin, size), split.v(begin, size),
                                 zero::View<const float>(grad).subview(begin, size), 0.5f,
                                 zero::View<zero::half>(copy_split).subview(begin, size));
  }
  EXPECT_EQ(whole.master, split.master);
  EXPECT_EQ(whole.m_codes, split.m_codes);
  EXPECT_EQ(whole.v_codes, split.v_codes);
  EXPECT_EQ(whole.m_scales, split.m_scales);
  EXPECT_EQ(whole.v_scales, split.v_scales);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<std::uint16_t>(copy_whole[i]),
              std::bit_cast<std::uint16_t>(copy_split[i]));
}

} // namespace
