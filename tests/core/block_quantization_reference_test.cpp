// The vectorised block codec (core/block_quantization.hpp: float tiles, rounding by 1.5 * 2^23,
// codes packed a tile at a time) against a quantizer written the plain way, one value at a time,
// from the header's contract alone: scale = max|x| / L, code = nearbyint(clamp(x * (L / max|x|))),
// value = code * scale, 4-bit codes two to a byte with value 2i in the low half of byte i. The
// packed bytes must be equal, byte for byte, for float, half and bfloat16 inputs and every block
// size around the codec's 256-value tile, and so must what comes back.
//
// This binary is compiled at -O3 (tests/core/CMakeLists.txt): the conversions into the codec's
// stack tiles are inlined there, and the sanitize preset runs it under AddressSanitizer, so a write
// past a tile at any of these sizes is an error here (GCC's -Wstringop-overflow once suspected
// one).

#include <zero/core/block_quantization.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using zero::BlockQuantization;

// The plain quantizer: one block, then one value, at a time.
std::vector<std::uint8_t> plain_pack(const BlockQuantization& q, const std::vector<float>& x) {
  const std::size_t n = x.size();
  const float top = float(q.levels());
  std::vector<std::uint8_t> packed(q.packed_bytes(n), 0);
  std::vector<std::int8_t> codes(n);
  for (std::size_t begin = 0, b = 0; begin < n; begin += q.block, ++b) {
    const std::size_t end = std::min(n, begin + q.block);
    float amax = 0.0f;
    for (std::size_t i = begin; i < end; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / top;
    const float inverse = amax > 0.0f ? top / amax : 0.0f;
    std::memcpy(packed.data() + b * sizeof(float), &scale, sizeof scale);
    for (std::size_t i = begin; i < end; ++i) {
      const float scaled = std::clamp(x[i] * inverse, -top, top);
      codes[i] = static_cast<std::int8_t>(std::nearbyint(scaled)); // ties to even
    }
  }
  std::uint8_t* out = packed.data() + q.blocks(n) * sizeof(float);
  for (std::size_t i = 0; i < n; ++i) {
    const auto code = static_cast<std::uint8_t>(codes[i]);
    if (q.bits == 8)
      out[i] = code;
    else
      out[i / 2] = static_cast<std::uint8_t>(out[i / 2] | (code & 0x0Fu) << (i % 2 == 0 ? 0 : 4));
  }
  return packed;
}

// Values of every magnitude, exact ties to round (x.5 codes), zeros and negative zeros.
std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (i % 7) {
    case 0:
      x[i] = uniform(random) * 1e-3f;
      break;
    case 1:
      x[i] = uniform(random) * 300.0f;
      break;
    case 2:
      x[i] = float(i % 5) - 2.5f;
      break; // ties once scaled by an integer-valued inverse
    case 3:
      x[i] = i % 2 ? 0.0f : -0.0f;
      break;
    default:
      x[i] = uniform(random);
    }
  }
  return x;
}

template <class T>
void expect_same_bytes_as_plain(const BlockQuantization& q, std::size_t n) {
  const std::vector<float> wide = values(n, unsigned(n * 31 + q.block));
  // The input in T, and the floats it stands for (what the plain quantizer sees).
  std::vector<T> input(n);
  std::vector<float> exact(n);
  for (std::size_t i = 0; i < n; ++i) {
    input[i] = zero::convert<T>(wide[i]);
    exact[i] = zero::convert<float>(input[i]);
  }
  std::vector<std::uint8_t> packed(q.packed_bytes(n));
  zero::quantize_blocks<T>(q, zero::View<const T>(input.data(), n), packed, "test values");
  const std::vector<std::uint8_t> expected = plain_pack(q, exact);
  const std::string what = std::string(zero::to_string(zero::dtype_of<T>)) + ", block " +
                           std::to_string(q.block) + ", " + std::to_string(q.bits) + " bits, " +
                           std::to_string(n) + " values";
  ASSERT_EQ(packed.size(), expected.size()) << what;
  for (std::size_t i = 0; i < packed.size(); ++i)
    ASSERT_EQ(packed[i], expected[i]) << what << ": byte " << i << " of " << packed.size();

  // Back: code * scale in float, then to T, as the plain way does it.
  std::vector<T> back(n);
  zero::dequantize_blocks<T>(q, packed, zero::View<T>(back.data(), n));
  const std::uint8_t* codes = expected.data() + q.blocks(n) * sizeof(float);
  for (std::size_t i = 0; i < n; ++i) {
    float scale;
    std::memcpy(&scale, expected.data() + (i / q.block) * sizeof(float), sizeof scale);
    int code = q.bits == 8 ? int(static_cast<std::int8_t>(codes[i]))
                           : int((codes[i / 2] >> (i % 2 == 0 ? 0 : 4)) & 0x0Fu);
    if (q.bits == 4 && code > 7) code -= 16;
    const T want = zero::convert<T>(float(code) * scale);
    ASSERT_EQ(zero::convert<float>(back[i]), zero::convert<float>(want)) << what << ": value " << i;
  }
}

// Sizes at and around the codec's tile (256 values) and its multiples, blocks smaller than, equal
// to and larger than a tile, odd blocks that split 4-bit bytes between blocks.
const std::size_t block_sizes[] = {1, 3, 255, 256, 257, 1000, 4096};
const std::size_t value_counts[] = {1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 1023, 4097};

TEST(BlockQuantizationReference, FloatInputsPackTheSameBytesAsThePlainQuantizer) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (int bits : {8, 4})
    for (std::size_t block : block_sizes)
      for (std::size_t n : value_counts)
        expect_same_bytes_as_plain<float>({.block = block, .bits = bits}, n);
}

TEST(BlockQuantizationReference, HalfInputsPackTheSameBytesAsThePlainQuantizer) {
  for (int bits : {8, 4})
    for (std::size_t block : block_sizes)
      for (std::size_t n : value_counts)
        expect_same_bytes_as_plain<zero::half>({.block = block, .bits = bits}, n);
}

TEST(BlockQuantizationReference, BFloat16InputsPackTheSameBytesAsThePlainQuantizer) {
  for (int bits : {8, 4})
    for (std::size_t block : block_sizes)
      for (std::size_t n : value_counts)
        expect_same_bytes_as_plain<zero::bfloat16>({.block = block, .bits = bits}, n);
}

} // namespace
