#pragma once
// Block quantization to 8 or 4 bits, for ZeRO++'s quantized weight gathers (qwZ, 8 bits) and
// quantized gradient reduction (qgZ, 4 bits as in the paper): values are cut into blocks of `block`
// elements; each block is stored as one float scale, max|x| / L, and one signed code per value,
// round(x / scale) in [-L, L], with L = 127 (8 bits) or 7 (4 bits). A value comes back as
// code * scale, so the error of any value is at most half its block's scale, max|x| / (2L) (plus
// the rounding of a half-precision target type). The packed form of n values is the
// ceil(n / block) scales, then the codes: n bytes, or ceil(n / 2) bytes of two codes each (value 2i
// in the low half of byte i), so that blocks of equal size pack to equal sizes and a collective
// moves them end to end.
//
// The owner of the values quantizes them once and every reader, the owner included, dequantizes
// the same bytes with the same arithmetic: all ranks see the same values.

#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

struct BlockQuantization {
  std::size_t block = 256; // values per scale
  int bits = 8;            // per value: 8 or 4

  // The largest code: codes run from -levels() to levels().
  int levels() const noexcept { return bits == 4 ? 7 : 127; }
  std::size_t blocks(std::size_t n) const noexcept { return (n + block - 1) / block; }
  std::size_t code_bytes(std::size_t n) const noexcept { return bits == 4 ? (n + 1) / 2 : n; }
  // Bytes of the packed form of n values.
  std::size_t packed_bytes(std::size_t n) const noexcept {
    return blocks(n) * sizeof(float) + code_bytes(n);
  }
  // The most a value of a block whose largest magnitude is `amax` can move.
  float error_bound(float amax) const noexcept { return amax / float(2 * levels()); }

  void validate() const {
    require(block >= 1, "quantization: the block size must be at least 1 value");
    require(bits == 8 || bits == 4,
            "quantization: codes have 8 or 4 bits, not " + std::to_string(bits));
  }
  friend bool operator==(const BlockQuantization&, const BlockQuantization&) = default;
};

namespace detail {

// Values go through float tiles of this many: conversions from and to half and bfloat16 run as
// vector loops (convert_n), and the loops below vectorise.
inline constexpr std::size_t codec_tile = 256;

// The largest magnitude of x[0, n), and whether all of x is finite. On the bits: magnitudes are
// non-negative floats, whose bit patterns order as their values, with infinities and NaNs above
// every finite one; an integer maximum is a loop the compiler turns into vector code.
inline std::pair<float, bool> tile_magnitude(const float* x, std::size_t n) noexcept {
  std::uint32_t largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bits &= 0x7fffffffu;
    largest = largest > bits ? largest : bits;
  }
  float amax;
  std::memcpy(&amax, &largest, sizeof amax);
  return {amax, largest < 0x7f800000u};
}

// codes[i] = round(x[i] * inverse) to the nearest even, within [-levels, levels]. Adding and
// taking away 1.5 * 2^23 rounds a float of magnitude below 2^22 to the nearest integer, ties to
// even, as nearbyint does in the default rounding mode, and vectorises where nearbyint does not.
// The clamp sits between the product and the sum, so that no compiler fuses them into one
// multiply-add, which would round the product differently (and clamping first changes nothing:
// the bounds are integers).
inline void tile_codes(const float* x, std::size_t n, float inverse, int levels,
                       std::int8_t* codes) noexcept {
  const float top = float(levels);
  constexpr float round_even = 12582912.0f; // 1.5 * 2^23
  for (std::size_t i = 0; i < n; ++i) {
    float scaled = x[i] * inverse;
    scaled = scaled < -top ? -top : scaled;
    scaled = scaled > top ? top : scaled;
    const float code = (scaled + round_even) - round_even;
    codes[i] = static_cast<std::int8_t>(static_cast<int>(code));
  }
}

// Codes of values [begin, begin + n) of a packed stream, to and from one int8 each.
inline void write_codes(int bits, std::uint8_t* codes, std::size_t begin, std::size_t n,
                        const std::int8_t* from) noexcept {
  if (bits == 8) {
    std::memcpy(codes + begin, from, n);
    return;
  }
  std::size_t i = 0;
  if (begin % 2 == 1 && n > 0) { // the high half of a byte whose low half an earlier block wrote
    codes[begin / 2] = static_cast<std::uint8_t>((codes[begin / 2] & 0x0Fu) |
                                                 (static_cast<unsigned>(from[0]) & 0x0Fu) << 4);
    i = 1;
  }
  std::uint8_t* out = codes + (begin + i) / 2;
  const std::size_t pairs = (n - i) / 2;
  for (std::size_t j = 0; j < pairs; ++j)
    out[j] = static_cast<std::uint8_t>((static_cast<unsigned>(from[i + 2 * j]) & 0x0Fu) |
                                       (static_cast<unsigned>(from[i + 2 * j + 1]) & 0x0Fu) << 4);
  if ((n - i) % 2 == 1) // a low half alone: the next block writes the high half
    out[pairs] = static_cast<std::uint8_t>(static_cast<unsigned>(from[n - 1]) & 0x0Fu);
}

inline void read_codes(int bits, const std::uint8_t* codes, std::size_t begin, std::size_t n,
                       std::int8_t* to) noexcept {
  if (bits == 8) {
    std::memcpy(to, codes + begin, n);
    return;
  }
  // A 4-bit code, sign-extended: the nibble's top bit counts -8.
  auto extend = [](unsigned nibble) {
    return static_cast<std::int8_t>(static_cast<int>(nibble ^ 0x8u) - 8);
  };
  std::size_t i = 0;
  if (begin % 2 == 1 && n > 0) {
    to[0] = extend(codes[begin / 2] >> 4);
    i = 1;
  }
  const std::uint8_t* in = codes + (begin + i) / 2;
  const std::size_t pairs = (n - i) / 2;
  for (std::size_t j = 0; j < pairs; ++j) {
    to[i + 2 * j] = extend(in[j] & 0x0Fu);
    to[i + 2 * j + 1] = extend(in[j] >> 4);
  }
  if ((n - i) % 2 == 1) to[n - 1] = extend(in[pairs] & 0x0Fu);
}

inline float block_scale(const std::uint8_t* packed, std::size_t b) noexcept {
  float scale = 0.0f;
  std::memcpy(&scale, packed + b * sizeof(float), sizeof(float));
  return scale;
}

// f(at, tile, m): the dequantized values [at, at + m) of the packed form of n values, a tile at a
// time.
template <class F>
void for_each_dequantized_tile(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                               std::size_t n, F&& f) {
  const std::uint8_t* codes = packed.data() + q.blocks(n) * sizeof(float);
  alignas(64) std::int8_t code_tile[codec_tile];
  alignas(64) float value_tile[codec_tile];
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    const float scale = block_scale(packed.data(), b);
    const std::size_t end = std::min(n, begin + q.block);
    for (std::size_t at = begin; at < end; at += codec_tile) {
      const std::size_t m = std::min(codec_tile, end - at);
      read_codes(q.bits, codes, at, m, code_tile);
      for (std::size_t i = 0; i < m; ++i)
        value_tile[i] = static_cast<float>(code_tile[i]) * scale;
      f(at, value_tile, m);
    }
  }
}

inline void require_packed_size(const char* what, const BlockQuantization& q, std::size_t n,
                                std::size_t bytes) {
  require(bytes == q.packed_bytes(n), std::string(what) + ": " + std::to_string(n) +
                                          " values pack into " + std::to_string(q.packed_bytes(n)) +
                                          " bytes, got " + std::to_string(bytes));
}

} // namespace detail

// What a block holding a NaN or an infinity becomes, which no scale can represent: an error, or
// (gradients, whose overflow the loss scaler must see) a block whose values all come back NaN.
enum class NonFinite { refuse, propagate };

// Packs `values` into `packed` (packed_bytes(values.size()) bytes). A block holding a NaN or an
// infinity throws Error(numerical) naming `what` and the values, or with NonFinite::propagate packs
// a NaN scale.
//
// GCC 12 at -O3 warns that the bfloat16 conversion into value_tile writes "64 bytes into a region
// of size 0" at offset 1024, one tile past its end, after it unrolls convert_n's vector loop. No
// call can: every tile is m = min(codec_tile, ...) values, and
// block_quantization_reference_test.cpp converts at every tile edge (1..4097 values, blocks
// of 1..4096) under AddressSanitizer at -O3 without a fault. A restated bound (m = min(m,
// codec_tile)) does not silence it, so this one warning is off here and nowhere else.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
template <Element T>
void quantize_blocks(const BlockQuantization& q, View<const T> values,
                     std::span<std::uint8_t> packed, const std::string& what,
                     NonFinite non_finite = NonFinite::refuse) {
  const std::size_t n = values.size();
  detail::require_packed_size("quantize_blocks", q, n, packed.size());
  std::uint8_t* scales = packed.data();
  std::uint8_t* codes = packed.data() + q.blocks(n) * sizeof(float);
  const int levels = q.levels();
  alignas(64) float value_tile[detail::codec_tile];
  alignas(64) std::int8_t code_tile[detail::codec_tile];
  // Tile [at, at + m) as float: the values themselves, or converted into value_tile.
  auto as_float = [&](std::size_t at, std::size_t m) -> const float* {
    if constexpr (std::is_same_v<T, float>) {
      return values.data() + at;
    } else {
      convert_n(values.data() + at, value_tile, m);
      return value_tile;
    }
  };
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    const std::size_t end = std::min(n, begin + q.block);
    float amax = 0.0f;
    bool finite = true;
    for (std::size_t at = begin; at < end; at += detail::codec_tile) {
      const std::size_t m = std::min(detail::codec_tile, end - at);
      const auto [tile_max, tile_finite] = detail::tile_magnitude(as_float(at, m), m);
      amax = std::max(amax, tile_max);
      finite = finite && tile_finite;
    }
    if (!finite && non_finite == NonFinite::propagate) {
      const float nan = std::numeric_limits<float>::quiet_NaN(); // codes 0: 0 * NaN is NaN
      std::memcpy(scales + b * sizeof(float), &nan, sizeof(float));
      std::memset(code_tile, 0, sizeof code_tile);
      for (std::size_t at = begin; at < end; at += detail::codec_tile)
        detail::write_codes(q.bits, codes, at, std::min(detail::codec_tile, end - at), code_tile);
      continue;
    }
    if (!finite)
      fail(ErrorKind::numerical, what + ": values " + std::to_string(begin) + ".." +
                                     std::to_string(end - 1) +
                                     " hold a NaN or an infinity, which " + std::to_string(q.bits) +
                                     "-bit quantization cannot carry");
    const float scale = amax / float(levels);
    const float inverse = amax > 0.0f ? float(levels) / amax : 0.0f;
    std::memcpy(scales + b * sizeof(float), &scale, sizeof(float));
    for (std::size_t at = begin; at < end; at += detail::codec_tile) {
      const std::size_t m = std::min(detail::codec_tile, end - at);
      // A block of one tile was converted above and is still in value_tile.
      const float* x = end - begin <= detail::codec_tile && !std::is_same_v<T, float>
                           ? value_tile
                           : as_float(at, m);
      detail::tile_codes(x, m, inverse, levels, code_tile);
      detail::write_codes(q.bits, codes, at, m, code_tile);
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Unpacks n = values.size() values from `packed`.
template <Element T>
void dequantize_blocks(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                       View<T> values) {
  detail::require_packed_size("dequantize_blocks", q, values.size(), packed.size());
  detail::for_each_dequantized_tile(q, packed, values.size(),
                                    [&](std::size_t at, const float* tile, std::size_t m) {
                                      convert_n(tile, values.data() + at, m);
                                    });
}

// sums[i] += the i-th value of `packed`, in float: a reduction of quantized contributions adds
// them one source at a time, in a fixed order.
inline void dequantize_add_blocks(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                                  std::span<float> sums) {
  detail::require_packed_size("dequantize_add_blocks", q, sums.size(), packed.size());
  detail::for_each_dequantized_tile(q, packed, sums.size(),
                                    [&](std::size_t at, const float* tile, std::size_t m) {
                                      float* to = sums.data() + at;
                                      for (std::size_t i = 0; i < m; ++i)
                                        to[i] += tile[i];
                                    });
}

} // namespace zero
