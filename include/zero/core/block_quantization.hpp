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

// The largest magnitude of values[begin, end), and whether all of them are finite (std::max would
// pass over a NaN).
template <class T>
std::pair<float, bool> block_magnitude(const T* values, std::size_t begin, std::size_t end) {
  float amax = 0.0f;
  bool finite = true;
  for (std::size_t i = begin; i < end; ++i) {
    const float magnitude = std::fabs(static_cast<float>(values[i]));
    finite = finite & std::isfinite(magnitude);
    amax = std::max(amax, magnitude);
  }
  return {amax, finite};
}

inline int code_of(float x, float inverse, int levels) {
  const float code = std::nearbyint(x * inverse);
  return static_cast<int>(std::clamp(code, -float(levels), float(levels)));
}

// Code i of a 4-bit stream, sign-extended.
inline int nibble_code(const std::uint8_t* codes, std::size_t i) {
  const unsigned byte = codes[i / 2];
  const unsigned nibble = (i % 2 == 0 ? byte : byte >> 4) & 0xFu;
  return static_cast<int>(nibble ^ 0x8u) - 8;
}

// f(i, code * scale) for every value of the packed form of n values.
template <class F>
void for_each_dequantized(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                          std::size_t n, F&& f) {
  const std::uint8_t* scales = packed.data();
  const std::uint8_t* codes = packed.data() + q.blocks(n) * sizeof(float);
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    float scale = 0.0f;
    std::memcpy(&scale, scales + b * sizeof(float), sizeof(float));
    const std::size_t end = std::min(n, begin + q.block);
    if (q.bits == 4) {
      for (std::size_t i = begin; i < end; ++i)
        f(i, static_cast<float>(nibble_code(codes, i)) * scale);
    } else {
      const auto* bytes = reinterpret_cast<const std::int8_t*>(codes);
      for (std::size_t i = begin; i < end; ++i)
        f(i, static_cast<float>(bytes[i]) * scale);
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
template <Element T>
void quantize_blocks(const BlockQuantization& q, View<const T> values,
                     std::span<std::uint8_t> packed, const std::string& what,
                     NonFinite non_finite = NonFinite::refuse) {
  const std::size_t n = values.size();
  detail::require_packed_size("quantize_blocks", q, n, packed.size());
  std::uint8_t* scales = packed.data();
  std::uint8_t* codes = packed.data() + q.blocks(n) * sizeof(float);
  const int levels = q.levels();
  if (q.bits == 4) std::memset(codes, 0, q.code_bytes(n)); // nibbles are or-ed in
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    const std::size_t end = std::min(n, begin + q.block);
    const auto [amax, finite] = detail::block_magnitude(values.data(), begin, end);
    if (!finite && non_finite == NonFinite::propagate) {
      const float nan = std::numeric_limits<float>::quiet_NaN(); // codes stay 0: 0 * NaN is NaN
      std::memcpy(scales + b * sizeof(float), &nan, sizeof(float));
      if (q.bits == 8) std::memset(codes + begin, 0, end - begin);
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
    if (q.bits == 4) {
      for (std::size_t i = begin; i < end; ++i) {
        const auto nibble = static_cast<unsigned>(
            detail::code_of(static_cast<float>(values[i]), inverse, levels) & 0xF);
        codes[i / 2] =
            static_cast<std::uint8_t>(codes[i / 2] | (i % 2 == 0 ? nibble : nibble << 4));
      }
    } else {
      for (std::size_t i = begin; i < end; ++i)
        codes[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(
            detail::code_of(static_cast<float>(values[i]), inverse, levels)));
    }
  }
}

// Unpacks n = values.size() values from `packed`.
template <Element T>
void dequantize_blocks(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                       View<T> values) {
  detail::require_packed_size("dequantize_blocks", q, values.size(), packed.size());
  detail::for_each_dequantized(q, packed, values.size(),
                               [&](std::size_t i, float x) { values[i] = static_cast<T>(x); });
}

// sums[i] += the i-th value of `packed`, in float: a reduction of quantized contributions adds
// them one source at a time, in a fixed order.
inline void dequantize_add_blocks(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                                  std::span<float> sums) {
  detail::require_packed_size("dequantize_add_blocks", q, sums.size(), packed.size());
  detail::for_each_dequantized(q, packed, sums.size(),
                               [&](std::size_t i, float x) { sums[i] += x; });
}

} // namespace zero
