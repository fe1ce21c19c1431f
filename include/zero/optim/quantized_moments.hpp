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
#include "zero/core/memory_space.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/dynamic_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace zero {

inline constexpr std::size_t quantized_moment_block = 2048;

// Blocks of an n-element moment: the last one may be partial.
constexpr std::size_t quantized_blocks(std::size_t n) noexcept {
  return (n + quantized_moment_block - 1) / quantized_moment_block;
}

// A moment's storage: n codes and quantized_blocks(n) scales. Views: the memory is the caller's
// (the optimizer store's), in `Space` (host memory; device memory for the device step).
template <MemorySpace Space = host>
struct BasicQuantizedMoment {
  View<std::uint8_t, Space> codes;
  View<float, Space> scales;

  std::size_t size() const noexcept { return codes.size(); }
  void check(const char* what) const {
    require(scales.size() == quantized_blocks(codes.size()),
            std::string(what) + ": " + std::to_string(codes.size()) + " codes need " +
                std::to_string(quantized_blocks(codes.size())) + " block scales, got " +
                std::to_string(scales.size()));
  }
};
using QuantizedMoment = BasicQuantizedMoment<host>;

namespace detail {
// The 8-bit step's argument checks, made by each of its forms (host, stream space, CUDA) before it
// runs or is queued: n is the master weights' size, copy_size 0 for no compute copy.
template <class Space>
void require_quantized_step_arguments(std::size_t n, const BasicQuantizedMoment<Space>& exp_avg,
                                      const BasicQuantizedMoment<Space>& exp_avg_sq,
                                      std::size_t grad_size, std::size_t copy_size,
                                      float grad_multiplier) {
  exp_avg.check("quantized_fused_step: exp_avg");
  exp_avg_sq.check("quantized_fused_step: exp_avg_sq");
  const auto same_size = [n](std::size_t size, const char* what) {
    if (size != n)
      fail(ErrorKind::invalid_argument, std::string("quantized_fused_step: ") + what + " has " +
                                            std::to_string(size) +
                                            " elements, the master weights " + std::to_string(n));
  };
  same_size(exp_avg.size(), "exp_avg");
  same_size(exp_avg_sq.size(), "exp_avg_sq");
  same_size(grad_size, "the gradient");
  if (copy_size != 0) same_size(copy_size, "the compute copy");
  require(std::isfinite(grad_multiplier),
          "quantized_fused_step: the gradient multiplier must be finite");
}
} // namespace detail

// A moment's codes and scales as they are kept, with the map they index: what a checkpoint that
// saves 8-bit moments in 8 bits reads out of the store. The codes start on a block boundary.
struct QuantizedMomentView {
  const DynamicMap* map = nullptr;
  View<const std::uint8_t> codes;
  View<const float> scales;

  std::size_t size() const noexcept { return codes.size(); }
};

// The largest |values[i]|, NaNs ignored (0 for none). The maximum of floats is exact in any
// order, so the lanes give the scalar loop's value.
ZERO_SIMD_BEGIN
inline float absolute_maximum(const float* values, std::size_t n) noexcept {
  float absmax = 0.0f;
  std::size_t i = 0;
#if defined(ZERO_SIMD_AVX2) || defined(ZERO_SIMD_AVX512)
  // maxps gives its second operand where either is NaN: the running maximum, as std::max does.
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    a = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(values + i), magnitude), a);
    b = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(values + i + 8), magnitude), b);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(a, b));
  for (const float lane : lanes)
    absmax = std::max(absmax, lane);
#endif
  for (; i < n; ++i)
    absmax = std::max(absmax, std::fabs(values[i]));
  return absmax;
}
ZERO_SIMD_END

// One block: the scale (its absolute maximum) and the codes of `values`.
inline float quantize_block(const DynamicMap& map, const float* values, std::size_t n,
                            std::uint8_t* codes) noexcept {
  const float absmax = absolute_maximum(values, n);
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

// Values that are the dequantization of some codes and scale (a moment read out for a checkpoint)
// are given back those codes and that scale; other values are quantized as quantize_block does.
// Quantizing afresh would not always give them back: the signed map holds 1 but not -1, so a block
// whose largest magnitude was negative dequantizes to a largest magnitude of 0.99... x scale,
// which a fresh quantization would take as the scale. The scale is sought among the largest
// magnitude divided by each of the two largest magnitudes of the map (and their neighbouring
// floats), kept when it reproduces every value bit for bit.
inline float requantize_block(const DynamicMap& map, const float* values, std::size_t n,
                              std::uint8_t* codes) noexcept {
  const float absmax = absolute_maximum(values, n);
  if (absmax >= std::numeric_limits<float>::min() && n <= quantized_moment_block) {
    alignas(64) float again[quantized_moment_block];
    const float top[] = {map.values().back(), -map.values().front()};
    for (const float magnitude : top) {
      if (!(magnitude > 0.0f)) continue; // the unsigned map has no negative values
      const float guess = absmax / magnitude;
      for (const float scale : {guess, std::nextafter(guess, 0.0f),
                                std::nextafter(guess, std::numeric_limits<float>::infinity())}) {
        map.quantize(values, n, 1.0f / scale, codes);
        map.dequantize(codes, n, scale, again);
        if (std::memcmp(again, values, n * sizeof(float)) == 0) return scale;
      }
    }
  }
  return quantize_block(map, values, n, codes);
}

namespace detail {
// Every block of `values` through block(map, values, n, codes), which returns the block's scale.
template <class Block>
void quantize_blocks(Block&& block, const char* what, const DynamicMap& map,
                     View<const float> values, QuantizedMoment into) {
  into.check(what);
  require(values.size() == into.size(), std::string(what) + ": " + std::to_string(values.size()) +
                                            " values into " + std::to_string(into.size()) +
                                            " codes");
  for (std::size_t b = 0; b < into.scales.size(); ++b) {
    const std::size_t begin = b * quantized_moment_block;
    const std::size_t n = std::min(quantized_moment_block, values.size() - begin);
    into.scales[b] = block(map, values.data() + begin, n, into.codes.data() + begin);
  }
}
} // namespace detail

// A whole moment from and to fp32 (checkpoints converting fp32 states, tests).
inline void quantize(const DynamicMap& map, View<const float> values, QuantizedMoment into) {
  detail::quantize_blocks(quantize_block, "quantize", map, values, into);
}

// quantize() that gives back the codes and scales of values that are a dequantized moment
// (requantize_block): how a moment read out of the store for a checkpoint is put back.
inline void requantize(const DynamicMap& map, View<const float> values, QuantizedMoment into) {
  detail::quantize_blocks(requantize_block, "requantize", map, values, into);
}

inline void dequantize(const QuantizedMomentView& from, View<float> values) {
  require(from.scales.size() == quantized_blocks(from.size()),
          "dequantize: " + std::to_string(from.size()) + " codes need " +
              std::to_string(quantized_blocks(from.size())) + " block scales, got " +
              std::to_string(from.scales.size()));
  require(values.size() == from.size(), "dequantize: " + std::to_string(from.size()) +
                                            " codes into " + std::to_string(values.size()) +
                                            " values");
  for (std::size_t b = 0; b < from.scales.size(); ++b) {
    const std::size_t begin = b * quantized_moment_block;
    const std::size_t n = std::min(quantized_moment_block, values.size() - begin);
    dequantize_block(*from.map, from.codes.data() + begin, from.scales[b], n,
                     values.data() + begin);
  }
}

inline void dequantize(const DynamicMap& map, const QuantizedMoment& from, View<float> values) {
  dequantize(QuantizedMomentView{&map, View<const std::uint8_t>(from.codes.data(), from.size()),
                                 View<const float>(from.scales.data(), from.scales.size())},
             values);
}

} // namespace zero
