#pragma once
// Block quantization to int8, for ZeRO++'s quantized weight gathers (qwZ): values are cut into
// blocks of `block` elements; each block is stored as one float scale, max|x| / 127, and one
// signed byte per value, round(x / scale). A value comes back as q * scale, so the error of any
// value is at most half its block's scale, max|x| / 254 (plus the rounding of a half-precision
// target type). The packed form of n values is the ceil(n / block) scales, then the n bytes, so
// that blocks of equal size pack to equal sizes and a gather moves them end to end.
//
// The owner of the values quantizes them once and every rank, the owner included, dequantizes the
// same bytes with the same arithmetic: all ranks compute with the same weights.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace zero {

struct BlockQuantization {
  std::size_t block = 256; // values per scale

  std::size_t blocks(std::size_t n) const noexcept { return (n + block - 1) / block; }
  // Bytes of the packed form of n values.
  std::size_t packed_bytes(std::size_t n) const noexcept { return blocks(n) * sizeof(float) + n; }
  // The most a value of a block whose largest magnitude is `amax` can move.
  static float error_bound(float amax) noexcept { return amax / 254.0f; }

  void validate() const {
    require(block >= 1, "quantization: the block size must be at least 1 value");
  }
};

// Packs `values` into `packed` (packed_bytes(values.size()) bytes). Throws Error(numerical) when a
// block holds a NaN or an infinity, which no scale can represent; `what` names the values.
template <Element T>
void quantize_blocks(const BlockQuantization& q, View<const T> values,
                     std::span<std::uint8_t> packed, const std::string& what) {
  const std::size_t n = values.size();
  require(packed.size() == q.packed_bytes(n),
          "quantize_blocks: " + std::to_string(n) + " values pack into " +
              std::to_string(q.packed_bytes(n)) + " bytes, got " + std::to_string(packed.size()));
  std::uint8_t* scales = packed.data();
  auto* codes = reinterpret_cast<std::int8_t*>(packed.data() + q.blocks(n) * sizeof(float));
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    const std::size_t end = std::min(n, begin + q.block);
    float amax = 0.0f;
    bool finite = true; // std::max would pass over a NaN
    for (std::size_t i = begin; i < end; ++i) {
      const float magnitude = std::fabs(static_cast<float>(values[i]));
      finite = finite & std::isfinite(magnitude);
      amax = std::max(amax, magnitude);
    }
    if (!finite)
      fail(ErrorKind::numerical, what + ": values " + std::to_string(begin) + ".." +
                                     std::to_string(end - 1) +
                                     " hold a NaN or an infinity, which int8 quantization cannot "
                                     "carry");
    const float scale = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    std::memcpy(scales + b * sizeof(float), &scale, sizeof(float));
    for (std::size_t i = begin; i < end; ++i) {
      const float code = std::nearbyint(static_cast<float>(values[i]) * inverse);
      codes[i] = static_cast<std::int8_t>(std::clamp(code, -127.0f, 127.0f));
    }
  }
}

// Unpacks n = values.size() values from `packed`.
template <Element T>
void dequantize_blocks(const BlockQuantization& q, std::span<const std::uint8_t> packed,
                       View<T> values) {
  const std::size_t n = values.size();
  require(packed.size() == q.packed_bytes(n),
          "dequantize_blocks: " + std::to_string(n) + " values come from " +
              std::to_string(q.packed_bytes(n)) + " bytes, got " + std::to_string(packed.size()));
  const std::uint8_t* scales = packed.data();
  const auto* codes =
      reinterpret_cast<const std::int8_t*>(packed.data() + q.blocks(n) * sizeof(float));
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += q.block) {
    float scale = 0.0f;
    std::memcpy(&scale, scales + b * sizeof(float), sizeof(float));
    const std::size_t end = std::min(n, begin + q.block);
    for (std::size_t i = begin; i < end; ++i)
      values[i] = static_cast<T>(static_cast<float>(codes[i]) * scale);
  }
}

} // namespace zero
