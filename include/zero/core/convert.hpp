#pragma once
// Bulk element conversion on the host: convert_n(src, dst, n), and accumulate_n(src, dst, n) into
// float. Half <-> float uses F16C where the compiler targets it (its rounding is the same
// round-to-nearest-even as zero::half, which the tests check over all bit patterns); everything
// else is a loop the compiler vectorises.

#include "zero/core/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace zero {

namespace detail {
// GCC 12 reports _mm512_undefined_* inside its own intrinsics as maybe-uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline void half_to_float_n(const half* src, float* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t end = n - n % 16; i < end; i += 16)
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (const std::size_t end = n - n % 8; i < end; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i)
    dst[i] = static_cast<float>(src[i]);
}

inline void float_to_half_n(const float* src, half* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t end = n - n % 16; i < end; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
  for (const std::size_t end = n - n % 8; i < end; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i)
    dst[i] = half(src[i]);
}

inline void float_to_bfloat16_n(const float* src, bfloat16* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // Round to nearest even on the bits (not AVX512-BF16's instruction, which flushes subnormals).
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (const std::size_t end = n - n % 16; i < end; i += 16) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), lsb), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, magnitude), infinity);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet);
    const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
#endif
  for (; i < n; ++i) {
    std::uint32_t x;
    std::memcpy(&x, src + i, 4);
    const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    dst[i].bits = static_cast<std::uint16_t>(is_nan ? ((x >> 16) | 0x40u) : rounded);
  }
}

inline void bfloat16_to_float_n(const bfloat16* src, float* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t end = n - n % 16; i < end; i += 16) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
#endif
  for (; i < n; ++i) {
    const std::uint32_t x = static_cast<std::uint32_t>(src[i].bits) << 16;
    std::memcpy(dst + i, &x, 4);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
} // namespace detail

template <Element From, Element To>
void convert_n(const From* src, To* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<From, To>) {
    if (n != 0 && src != dst) std::memcpy(dst, src, n * sizeof(To));
  } else if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) {
    detail::half_to_float_n(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) {
    detail::float_to_half_n(src, dst, n);
  } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
    detail::bfloat16_to_float_n(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) {
    detail::float_to_bfloat16_n(src, dst, n);
  } else {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = convert<To>(src[i]);
  }
}

// dst[i] += float(src[i]): accumulation of gradients in float. Low-precision inputs are widened a
// tile at a time into a stack buffer, so the add stays a simple vectorised loop.
template <Element From>
void accumulate_n(const From* src, float* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<From, float>) {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] += src[i];
  } else {
    constexpr std::size_t tile = 1024;
    alignas(64) float widened[tile];
    for (std::size_t i = 0; i < n; i += tile) {
      const std::size_t m = n - i < tile ? n - i : tile;
      convert_n(src + i, widened, m);
      for (std::size_t j = 0; j < m; ++j)
        dst[i + j] += widened[j];
    }
  }
}

} // namespace zero
