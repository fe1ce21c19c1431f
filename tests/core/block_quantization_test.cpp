// Block quantization (ZeRO++'s qwZ with 8 bits, qgZ with 4): the packed size, the error bound
// max|x| / 254 or max|x| / 14 per block, exact zeros and block maxima, the tail block, every 4-bit
// code, accumulation in float, half-precision targets, and a clear error for values no scale can
// carry.

#include <zero/core/block_quantization.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using zero::BlockQuantization;

std::vector<std::uint8_t> pack(const BlockQuantization& q, const std::vector<float>& values) {
  std::vector<std::uint8_t> packed(q.packed_bytes(values.size()));
  zero::quantize_blocks<float>(q, zero::View<const float>(values.data(), values.size()), packed,
                               "test values");
  return packed;
}

template <class T>
std::vector<T> unpack(const BlockQuantization& q, const std::vector<std::uint8_t>& packed,
                      std::size_t n) {
  std::vector<T> values(n);
  zero::dequantize_blocks<T>(q, packed, zero::View<T>(values.data(), n));
  return values;
}

TEST(BlockQuantization, PacksOneScaleAndOneBytePerValue) {
  const BlockQuantization q{.block = 4};
  EXPECT_EQ(q.packed_bytes(0), 0u);
  EXPECT_EQ(q.packed_bytes(1), 4u + 1u);
  EXPECT_EQ(q.packed_bytes(4), 4u + 4u);
  EXPECT_EQ(q.packed_bytes(9), 3 * 4u + 9u);
  EXPECT_EQ(BlockQuantization{}.packed_bytes(1024), 4 * 4u + 1024u); // a quarter of fp32, nearly
}

TEST(BlockQuantization, EveryValueStaysWithinHalfItsBlocksScale) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int bits : {8, 4})
    for (const std::size_t block : {1u, 3u, 64u, 256u}) {
      const BlockQuantization q{.block = block, .bits = bits};
      std::vector<float> values(1001); // the last block is partial for most block sizes; n odd
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = normal(random) * (i < 500 ? 1e-3f : 30.0f); // blocks of very different ranges
      const auto back = unpack<float>(q, pack(q, values), values.size());
      double largest_error = 0;
      for (std::size_t begin = 0; begin < values.size(); begin += block) {
        const std::size_t end = std::min(values.size(), begin + block);
        float amax = 0;
        for (std::size_t i = begin; i < end; ++i)
          amax = std::max(amax, std::fabs(values[i]));
        for (std::size_t i = begin; i < end; ++i) {
          const float error = std::fabs(back[i] - values[i]);
          // The bound, plus the float rounding of code * scale.
          ASSERT_LE(error, q.error_bound(amax) * (1 + 1e-5f))
              << bits << " bits, block " << block << " value " << i;
          largest_error = std::max(largest_error, double(error) / amax);
        }
      }
      if (block > 1) {
        EXPECT_GT(largest_error, 0.0) << "block " << block << ": nothing was rounded";
      }
      // 4 bits are coarser: the worst error comes near its bound of 1/14 of the block's maximum.
      if (bits == 4 && block >= 64) {
        EXPECT_GT(largest_error, 0.5 / 14);
      }
    }
}

TEST(BlockQuantization, FourBitsPackTwoCodesAByteAndKeepEveryCode) {
  const BlockQuantization q{.block = 15, .bits = 4};
  EXPECT_EQ(q.levels(), 7);
  EXPECT_EQ(q.packed_bytes(0), 0u);
  EXPECT_EQ(q.packed_bytes(1), 4u + 1u);
  EXPECT_EQ(q.packed_bytes(15), 4u + 8u);
  EXPECT_EQ(q.packed_bytes(16), 2 * 4u + 8u);
  // Codes -7..7 in one block whose largest magnitude is 7: every code exactly, low and high halves.
  std::vector<float> values;
  for (int code = -7; code <= 7; ++code)
    values.push_back(float(code));
  const auto back = unpack<float>(q, pack(q, values), values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(back[i], values[i]) << i;
  EXPECT_THROW((BlockQuantization{.block = 4, .bits = 2}.validate()), zero::Error);
}

TEST(BlockQuantization, AccumulatesInFloatOneSourceAtATime) {
  const BlockQuantization q{.block = 4, .bits = 4};
  const std::vector<float> a{1.0f, -2.0f, 3.5f, 0.0f, 7.0f}, b{0.5f, 0.5f, -1.0f, 2.0f, -7.0f};
  const auto pa = pack(q, a), pb = pack(q, b);
  const auto da = unpack<float>(q, pa, a.size()), db = unpack<float>(q, pb, b.size());
  std::vector<float> sums(a.size(), 0.0f);
  zero::dequantize_add_blocks(q, pa, sums);
  zero::dequantize_add_blocks(q, pb, sums);
  for (std::size_t i = 0; i < sums.size(); ++i)
    EXPECT_EQ(sums[i], (0.0f + da[i]) + db[i]) << i;
  EXPECT_THROW(zero::dequantize_add_blocks(q, pa, std::span<float>(sums).first(4)), zero::Error);
}

TEST(BlockQuantization, ZerosAndEachBlocksLargestValueComeBackExactly) {
  const BlockQuantization q{.block = 3};
  const std::vector<float> values{0.0f, 0.0f, 0.0f, -2.5f, 1.0f, 0.0f, 7.0f};
  const auto back = unpack<float>(q, pack(q, values), values.size());
  EXPECT_EQ(back[0], 0.0f); // an all-zero block: scale 0, no division by it
  EXPECT_EQ(back[1], 0.0f);
  EXPECT_EQ(back[2], 0.0f);
  EXPECT_FLOAT_EQ(back[3], -2.5f); // code -127 times max / 127
  EXPECT_EQ(back[5], 0.0f);
  EXPECT_FLOAT_EQ(back[6], 7.0f); // a tail block of one value
}

TEST(BlockQuantization, UnpacksIntoHalfPrecision) {
  const BlockQuantization q{.block = 8};
  std::vector<float> values(20);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::sin(0.7f * float(i));
  const auto packed = pack(q, values);
  const auto as_float = unpack<float>(q, packed, values.size());
  const auto as_bf16 = unpack<zero::bfloat16>(q, packed, values.size());
  const auto as_half = unpack<zero::half>(q, packed, values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(float(as_bf16[i]), float(zero::bfloat16(as_float[i]))) << i;
    EXPECT_EQ(float(as_half[i]), float(zero::half(as_float[i]))) << i;
  }
}

TEST(BlockQuantization, ANonFiniteValueIsNamed) {
  const BlockQuantization q{.block = 4};
  std::vector<float> values(10, 1.0f);
  values[6] = std::numeric_limits<float>::quiet_NaN();
  try {
    (void)pack(q, values);
    FAIL() << "no error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::numerical);
    EXPECT_NE(std::string(e.what()).find(
                  "test values: values 4..7 hold a NaN or an infinity, which 8-bit quantization"),
              std::string::npos)
        << e.what();
  }
  values[6] = std::numeric_limits<float>::infinity();
  EXPECT_THROW((void)pack(q, values), zero::Error);
  // Gradients propagate it instead: the block comes back NaN, the others exact as before.
  for (const int bits : {8, 4}) {
    const BlockQuantization g{.block = 4, .bits = bits};
    std::vector<std::uint8_t> packed(g.packed_bytes(values.size()));
    zero::quantize_blocks<float>(g, zero::View<const float>(values.data(), values.size()), packed,
                                 "gradients", zero::NonFinite::propagate);
    const auto back = unpack<float>(g, packed, values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i >= 4 && i < 8) {
        EXPECT_TRUE(std::isnan(back[i])) << bits << " bits, value " << i;
      } else {
        EXPECT_EQ(back[i], 1.0f) << bits << " bits, value " << i;
      }
    }
  }
}

TEST(BlockQuantization, AWrongBufferSizeIsRefused) {
  const BlockQuantization q{.block = 4};
  std::vector<float> values(5, 1.0f);
  std::vector<std::uint8_t> packed(q.packed_bytes(5) - 1);
  EXPECT_THROW(
      zero::quantize_blocks<float>(q, zero::View<const float>(values.data(), 5), packed, "x"),
      zero::Error);
  EXPECT_THROW(BlockQuantization{.block = 0}.validate(), zero::Error);
  std::vector<std::uint8_t> four_bits(BlockQuantization{.block = 4, .bits = 4}.packed_bytes(5) + 1);
  EXPECT_THROW(zero::quantize_blocks<float>(BlockQuantization{.block = 4, .bits = 4},
                                            zero::View<const float>(values.data(), 5), four_bits,
                                            "x"),
               zero::Error);
}

} // namespace
