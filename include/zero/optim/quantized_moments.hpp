#pragma once
// An optimizer moment in 8 bits, block by block (Dettmers et al., arXiv 2110.02861): the moment
// is cut into blocks of `quantized_moment_block` elements; each block keeps its absolute maximum
// as one fp32 scale and each element the code of the nearest DynamicMap value to element / scale.
// Dequantized, element i of block b is map[code_i] x scale_b.
//
// Blocks of 2048 elements, as bitsandbytes' block-wise optimizers use: 4 bytes of scale per 2048
// elements (0.002 bytes per element and moment), while a block is small enough that one outlier
// costs the precision of 2048 elements only; and 2048 fp32 master weights are 8 KiB, whole blocks
// of the NVMe tier's 4 KiB alignment. Blocks start at the tensor's element 0, so that a shard that
// starts on a multiple of 2048 holds whole blocks and quantizes exactly what one rank would.

#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/dynamic_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace zero {

inline constexpr std::size_t quantized_moment_block = 2048;

// Blocks of an n-element moment: the last one may be partial.
constexpr std::size_t quantized_blocks(std::size_t n) noexcept {
  return (n + quantized_moment_block - 1) / quantized_moment_block;
}

// A moment's storage: n codes and quantized_blocks(n) scales. Views: the memory is the caller's
// (the optimizer store's).
struct QuantizedMoment {
  View<std::uint8_t> codes;
  View<float> scales;

  std::size_t size() const noexcept { return codes.size(); }
  void check(const char* what) const {
    require(scales.size() == quantized_blocks(codes.size()),
            std::string(what) + ": " + std::to_string(codes.size()) + " codes need " +
                std::to_string(quantized_blocks(codes.size())) + " block scales, got " +
                std::to_string(scales.size()));
  }
};

// One block: the scale (its absolute maximum) and the codes of `values`.
inline float quantize_block(const DynamicMap& map, const float* values, std::size_t n,
                            std::uint8_t* codes) noexcept {
  float absmax = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    absmax = std::max(absmax, std::fabs(values[i]));
  // A block whose largest magnitude is below the smallest normal float is kept as zeros: 1 / absmax
  // would overflow, and such moments are zero to Adam's step (its eps is 1e-8).
  if (!(absmax >= std::numeric_limits<float>::min())) {
    std::fill(codes, codes + n, map.nearest(0.0f));
    return 0.0f;
  }
  map.quantize(values, n, 1.0f / absmax, codes);
  return absmax;
}

inline void dequantize_block(const DynamicMap& map, const std::uint8_t* codes, float scale,
                             std::size_t n, float* values) noexcept {
  map.dequantize(codes, n, scale, values);
}

// A whole moment from and to fp32 (checkpoints converting fp32 states, tests).
inline void quantize(const DynamicMap& map, View<const float> values, QuantizedMoment into) {
  into.check("quantize");
  require(values.size() == into.size(), "quantize: " + std::to_string(values.size()) +
                                            " values into " + std::to_string(into.size()) +
                                            " codes");
  for (std::size_t b = 0; b < into.scales.size(); ++b) {
    const std::size_t begin = b * quantized_moment_block;
    const std::size_t n = std::min(quantized_moment_block, values.size() - begin);
    into.scales[b] = quantize_block(map, values.data() + begin, n, into.codes.data() + begin);
  }
}

inline void dequantize(const DynamicMap& map, const QuantizedMoment& from, View<float> values) {
  from.check("dequantize");
  require(values.size() == from.size(), "dequantize: " + std::to_string(from.size()) +
                                            " codes into " + std::to_string(values.size()) +
                                            " values");
  for (std::size_t b = 0; b < from.scales.size(); ++b) {
    const std::size_t begin = b * quantized_moment_block;
    const std::size_t n = std::min(quantized_moment_block, values.size() - begin);
    dequantize_block(map, from.codes.data() + begin, from.scales[b], n, values.data() + begin);
  }
}

} // namespace zero
