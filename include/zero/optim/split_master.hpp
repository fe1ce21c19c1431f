#pragma once
// A split master weight: the fp32 master represented by the 16-bit compute weight w (bfloat16 or
// float16, the copy forward and backward use) plus a signed residual r of 8 or 16 bits that keeps
// what rounding the master to w lost, so that the master costs 1 or 2 bytes beside the compute
// copy instead of 4, and updates smaller than half an ulp of w still accumulate.
//
// With F the compute type's fraction bits (7 for bfloat16, 10 for float16), b the residual's bits
// and E the binary exponent of w, raised to the type's smallest normal exponent (-126, -14) for
// zeros and subnormals, the residual counts units of u = 2^(E - F - b), a 2^b-th of w's ulp:
//
//   split:        w = round_to_nearest_even(m),  r = rne((m - w) / u) clamped to +-(2^(b-1) - 1)
//   reconstruct:  m = w + r * u
//
// m - w is exact in fp32 and at most half an ulp of w, so |r| <= 2^(b-1); only a tie (m exactly
// halfway between two compute values) reaches 2^(b-1), and is clamped. u is a power of two and
// the products are formed as (r * 2^-(F+b)) * 2^E and ((m - w) * 2^-E) * 2^(F+b), each exact, so
// the only rounding is that of r itself (and, for float16 with 16 bits, whose units are finer
// than fp32's, the sum's). Hence:
//   - splitting a reconstructed master gives back the same w and r (a checkpoint that saves the
//     reconstructed fp32 master resumes bit for bit);
//   - a reconstructed master is within u / 2 of the master that was split: with bfloat16 and 16
//     bits u is an fp32 ulp of w (the master is as precise as an fp32 one), with 8 bits 256 of
//     them.
// FlashOptim (arXiv 2602.23349) splits the same way with r scaled by 127 / (ulp / 2); a power of
// two keeps the reconstruction exact and the round trip the identity.
//
// The split fused step (split_fused_step; its 8-bit-moment form is in optim/quantized_step.hpp)
// reconstructs a run of masters into fp32 scratch, runs the unchanged fused update on it, and
// splits the result into the compute copy and the residuals: the same update as with an fp32
// master equal to the reconstructed one.

#include "zero/core/error.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/platform.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/split_master_rule.hpp"
#include "zero/precision/gradient_element.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace zero {

ZERO_SIMD_BEGIN
namespace detail {

#if defined(ZERO_SIMD_AVX512)
using split_int_lanes = __m512i;
inline __m512i split_exponent_lanes(__m512 w, std::uint32_t lo, std::uint32_t hi) noexcept {
  const __m512i e =
      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(w), 23), _mm512_set1_epi32(0xff));
  return _mm512_min_epu32(_mm512_max_epu32(e, _mm512_set1_epi32(static_cast<int>(lo))),
                          _mm512_set1_epi32(static_cast<int>(hi)));
}
inline __m512 power_of_two_lanes(__m512i biased) noexcept {
  return _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
}
inline __m512i negated_exponent_lanes(__m512i biased) noexcept {
  return _mm512_sub_epi32(_mm512_set1_epi32(254), biased);
}
inline __m512 load_residuals(const std::int8_t* r) noexcept {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r))));
}
inline __m512 load_residuals(const std::int16_t* r) noexcept {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r))));
}
inline void store_residuals(std::int8_t* r, __m512i units) noexcept { // |units| < 128
  _mm_storeu_si128(reinterpret_cast<__m128i*>(r), _mm512_cvtepi32_epi8(units));
}
inline void store_residuals(std::int16_t* r, __m512i units) noexcept { // |units| < 32768
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(r), _mm512_cvtepi32_epi16(units));
}
inline __m512 weight_where_no_residual(__m512 sum, __m512 weight, __m512 units) noexcept {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(units, _mm512_setzero_ps(), _CMP_EQ_OQ), sum,
                              weight);
}
inline __m512 clamp_lanes(__m512 x, float largest) noexcept {
  return _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-largest)), _mm512_set1_ps(largest));
}
inline __m512i round_lanes(__m512 x) noexcept {
  return _mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#elif defined(ZERO_SIMD_AVX2)
inline __m256i split_exponent_lanes(__m256 w, std::uint32_t lo, std::uint32_t hi) noexcept {
  const __m256i e =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(w), 23), _mm256_set1_epi32(0xff));
  return _mm256_min_epu32(_mm256_max_epu32(e, _mm256_set1_epi32(static_cast<int>(lo))),
                          _mm256_set1_epi32(static_cast<int>(hi)));
}
inline __m256 power_of_two_lanes(__m256i biased) noexcept {
  return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
}
inline __m256i negated_exponent_lanes(__m256i biased) noexcept {
  return _mm256_sub_epi32(_mm256_set1_epi32(254), biased);
}
inline __m256 load_residuals(const std::int8_t* r) noexcept {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r))));
}
inline __m256 load_residuals(const std::int16_t* r) noexcept {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r))));
}
inline __m128i narrow_to_int16(__m256i units) noexcept { // in range: the saturation never acts
  return _mm_packs_epi32(_mm256_castsi256_si128(units), _mm256_extracti128_si256(units, 1));
}
inline void store_residuals(std::int8_t* r, __m256i units) noexcept {
  const __m128i words = narrow_to_int16(units);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(r), _mm_packs_epi16(words, words));
}
inline void store_residuals(std::int16_t* r, __m256i units) noexcept {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(r), narrow_to_int16(units));
}
inline __m256 weight_where_no_residual(__m256 sum, __m256 weight, __m256 units) noexcept {
  return _mm256_blendv_ps(sum, weight, _mm256_cmp_ps(units, _mm256_setzero_ps(), _CMP_EQ_OQ));
}
inline __m256 clamp_lanes(__m256 x, float largest) noexcept {
  return _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-largest)), _mm256_set1_ps(largest));
}
inline __m256i round_lanes(__m256 x) noexcept {
  return _mm256_cvtps_epi32(x); // the default rounding: to nearest even
}
#endif

// n masters from w and r into `masters`.
template <SplitComputeType T, SplitResidual R>
void reconstruct_run(const T* w, const R* r, std::size_t n, float* masters) noexcept {
  std::size_t i = 0;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using C = SplitConstants<T, R>;
  using L = simd::Lanes<simd::vfloat>;
  const simd::vfloat scale_down(C::scale_down);
  for (; i + L::width <= n; i += L::width) {
    const simd::vfloat weight = L::load(w + i);
    const simd::vfloat power =
        power_of_two_lanes(split_exponent_lanes(weight.v, C::min_exponent, C::max_exponent));
    const simd::vfloat units = load_residuals(r + i);
    const simd::vfloat sum = weight + (units * scale_down) * power;
    L::store(masters + i, weight_where_no_residual(sum.v, weight.v, units.v));
  }
#endif
  for (; i < n; ++i)
    masters[i] = reconstruct_master(w[i], r[i]);
}

// n masters into w and r.
template <SplitComputeType T, SplitResidual R>
void split_run(const float* masters, std::size_t n, T* w, R* r) noexcept {
  std::size_t i = 0;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using C = SplitConstants<T, R>;
  using L = simd::Lanes<simd::vfloat>;
  const simd::vfloat scale_up(C::scale_up);
  for (; i + L::width <= n; i += L::width) {
    const simd::vfloat m = L::load(masters + i);
    L::store(w + i, m);
    const simd::vfloat weight = L::load(w + i); // the rounded value, as the scalar form reads it
    const simd::vfloat inverse = power_of_two_lanes(
        negated_exponent_lanes(split_exponent_lanes(weight.v, C::min_exponent, C::max_exponent)));
    const simd::vfloat units = ((m - weight) * inverse) * scale_up;
    store_residuals(r + i, round_lanes(clamp_lanes(units.v, C::largest)));
  }
#endif
  for (; i < n; ++i)
    split_master(masters[i], w[i], r[i]);
}

// Elements per run of fp32 scratch in the split step: 8 KiB, in L1 beside the moments' lines.
inline constexpr std::size_t split_run_elements = 2048;

} // namespace detail
ZERO_SIMD_END

// Every master of `master` reconstructed into `into` (of the same size).
template <SplitComputeType T, SplitResidual R>
void reconstruct_masters(View<const T> weights, View<const R> residuals, View<float> into) {
  require(weights.size() == residuals.size() && into.size() == weights.size(),
          "reconstruct_masters: the weights, residuals and output must have one size");
  detail::parallel_ranges(into.size(), [&](std::size_t begin, std::size_t end, int) noexcept {
    detail::reconstruct_run(weights.data() + begin, residuals.data() + begin, end - begin,
                            into.data() + begin);
  });
}

// Every value of `masters` split into `into`'s weights and residuals.
template <SplitComputeType T, SplitResidual R>
void split_masters(View<const float> masters, SplitMasterView<T, R> into) {
  require(into.weights.size() == into.residuals.size() && masters.size() == into.size(),
          "split_masters: the masters, weights and residuals must have one size");
  detail::parallel_ranges(masters.size(), [&](std::size_t begin, std::size_t end, int) noexcept {
    detail::split_run(masters.data() + begin, end - begin, into.weights.data() + begin,
                      into.residuals.data() + begin);
  });
}

namespace detail {
// split_fused_step's checks, which its stream-space forms make before queueing.
template <SplitComputeType T, SplitResidual R, class Space, std::size_t N>
void require_split_step_arguments(const SplitMasterView<T, R, Space>& master,
                                  const std::array<View<float, Space>, N>& state,
                                  std::size_t grad_size, float grad_multiplier) {
  const std::size_t n = master.size();
  require_same_size(master.residuals.size(), n, "the residual");
  for (const auto& s : state)
    require_same_size(s.size(), n, "an optimizer state tensor");
  require_same_size(grad_size, n, "the gradient");
  require(std::isfinite(grad_multiplier), "fused_step: the gradient multiplier must be finite");
}
} // namespace detail

// The fused step over split masters: state and grad cover the same elements as `master`. Every
// master is reconstructed, updated as fused_step updates an fp32 master, and split again into
// the compute copy (the new weights) and the residual.
template <ElementwiseUpdate U, class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>>
void split_fused_step(const U& update, SplitMasterView<T, R> master,
                      const std::array<View<float>, U::state_tensors>& state, View<G> grad,
                      float grad_multiplier = 1.0f) {
  const std::size_t n = master.size();
  detail::require_split_step_arguments(master, state, grad.size(), grad_multiplier);
  using Grad = std::remove_const_t<G>;
  detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
    alignas(64) float masters[detail::split_run_elements];
    for (std::size_t at = begin; at < end; at += detail::split_run_elements) {
      const std::size_t count = std::min(detail::split_run_elements, end - at);
      T* w = master.weights.data() + at;
      R* r = master.residuals.data() + at;
      detail::reconstruct_run(w, r, count, masters);
      detail::StepPointers<Grad, T, U::state_tensors> p{masters, {}, grad.data() + at, nullptr};
      for (std::size_t k = 0; k < U::state_tensors; ++k)
        p.state[k] = state[k].data() + at;
      detail::step_range<detail::CopyStores::none>(update, p, grad_multiplier, 0, count);
      detail::split_run(masters, count, w, r);
    }
  });
}

} // namespace zero
