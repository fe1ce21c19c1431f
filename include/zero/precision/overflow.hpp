#pragma once
// Overflow checks of gradient buffers, and the agreement of all ranks on the result.
//
// With loss scaling, a step whose gradients hold a NaN or an infinity on any rank must be skipped
// on every rank, before any master weight changes. The engine therefore checks first (read-only,
// or unscaling in place in the same pass), agrees across ranks with one all-reduce (max), and only
// then runs the optimizer step, which folds 1/scale into its own pass (optim/fused_step.hpp).
// bfloat16 gradients are checked too, although they are not scaled: a NaN is a NaN.

#include "zero/comm/communicator.hpp"
#include "zero/core/bit_cast.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/precision/gradient_element.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>

namespace zero {

ZERO_SIMD_BEGIN
namespace detail {

// Whether any of n elements has an all-ones exponent (NaN or infinity), from the bits alone.
template <class G>
bool any_nonfinite_bits(const G* data, std::size_t n) noexcept {
  using Bits = std::conditional_t<sizeof(G) == 2, std::uint16_t, std::uint32_t>;
  constexpr Bits exponent = static_cast<Bits>(std::is_same_v<G, float>  ? 0x7f800000u
                                              : std::is_same_v<G, half> ? 0x7c00u
                                                                        : 0x7f80u);
  [[maybe_unused]] const auto* bits = reinterpret_cast<const Bits*>(data);
  std::size_t i = 0;
  bool found = false;
#if defined(ZERO_SIMD_AVX512)
  constexpr std::size_t lanes = 64 / sizeof(Bits);
  if constexpr (sizeof(Bits) == 2) {
    const __m512i mask = _mm512_set1_epi16(static_cast<short>(exponent));
    __mmask32 any = 0;
    for (; i + lanes <= n; i += lanes)
      any |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(bits + i), mask), mask);
    if (i < n) {
      const __mmask32 tail = static_cast<__mmask32>((std::uint64_t{1} << (n - i)) - 1);
      any |= _mm512_mask_cmpeq_epi16_mask(
          tail, _mm512_and_si512(_mm512_maskz_loadu_epi16(tail, bits + i), mask), mask);
      i = n;
    }
    found = any != 0;
  } else {
    const __m512i mask = _mm512_set1_epi32(static_cast<int>(exponent));
    __mmask16 any = 0;
    for (; i + lanes <= n; i += lanes)
      any |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(bits + i), mask), mask);
    if (i < n) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
      any |= _mm512_mask_cmpeq_epi32_mask(
          tail, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, bits + i), mask), mask);
      i = n;
    }
    found = any != 0;
  }
#elif defined(ZERO_SIMD_AVX2)
  constexpr std::size_t lanes = 32 / sizeof(Bits);
  __m256i any = _mm256_setzero_si256();
  if constexpr (sizeof(Bits) == 2) {
    const __m256i mask = _mm256_set1_epi16(static_cast<short>(exponent));
    for (; i + lanes <= n; i += lanes) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i));
      any = _mm256_or_si256(any, _mm256_cmpeq_epi16(_mm256_and_si256(x, mask), mask));
    }
  } else {
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(exponent));
    for (; i + lanes <= n; i += lanes) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i));
      any = _mm256_or_si256(any, _mm256_cmpeq_epi32(_mm256_and_si256(x, mask), mask));
    }
  }
  found = !_mm256_testz_si256(any, any);
#endif
  for (; i < n; ++i)
    found |= (zero::detail::bit_cast<Bits>(data[i]) & exponent) == exponent;
  return found;
}

// data[i] *= factor over n elements; whether any stored result is NaN or infinite (a product
// that rounds past the largest half is an overflow too).
template <class G>
bool unscale_and_check_n(G* data, std::size_t n, float factor) noexcept {
  std::size_t i = 0;
  unsigned found = 0;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using V = simd::vfloat;
  using L = simd::Lanes<V>;
  const V f(factor);
  for (; i + L::width <= n; i += L::width) {
    L::store(data + i, L::load(data + i) * f);
    found |= simd::nonfinite_lanes(L::load(data + i)); // as stored (still in L1)
  }
#if defined(ZERO_SIMD_AVX512)
  if (i < n) {
    const auto tail = L::first(n - i);
    L::store(data + i, L::load(data + i, tail) * f, tail);
    found |= simd::nonfinite_lanes(L::load(data + i, tail));
    i = n;
  }
#endif
#endif
  for (; i < n; ++i) {
    simd::Lanes<float>::store(data + i, simd::Lanes<float>::load(data + i) * factor);
    found |= simd::is_nonfinite(simd::Lanes<float>::load(data + i)) ? 1u : 0u;
  }
  return found != 0;
}

} // namespace detail
ZERO_SIMD_END

// True when any gradient is NaN or infinite. Reads the buffer once and writes nothing.
template <class G, HostAccessibleSpace Space>
requires GradientElement<std::remove_const_t<G>>
[[nodiscard]] bool has_overflow(View<G, Space> grads) {
  return detail::parallel_reduce(grads.data(), grads.size(), false,
                                 detail::any_nonfinite_bits<std::remove_const_t<G>>,
                                 std::logical_or<>{});
}

// grads[i] *= factor (factor = 1 / loss scale), and true when any result is NaN or infinite: the
// unscale and the check in one pass. Meant for fp32 gradients; unscaling half gradients in place
// underflows small values, which is why the optimizer step can apply 1/scale on the fly instead.
template <GradientElement G, HostAccessibleSpace Space>
[[nodiscard]] bool unscale_and_check(View<G, Space> grads, float factor) {
  const auto unscale = [factor](G* part, std::size_t n) noexcept {
    return detail::unscale_and_check_n(part, n, factor);
  };
  return detail::parallel_reduce(grads.data(), grads.size(), false, unscale, std::logical_or<>{});
}

// Every rank's local result combined (all-reduce max): true on every rank when any rank found an
// overflow, so that all ranks skip the same step. A collective: every rank must call it.
template <ReducingCommunicator Comm>
requires HostAccessibleSpace<typename Comm::memory_space>
[[nodiscard]] bool global_overflow(Comm& comm, bool local_overflow) {
  std::array<std::int32_t, 1> flag{local_overflow ? 1 : 0};
  comm.all_reduce(flag, ReduceOp::max).wait();
  return flag[0] != 0;
}

} // namespace zero
