#pragma once
// The host passes of an optimizer whose step scales each parameter by a ratio of norms over the
// whole parameter (a TrustRatioUpdate, optim/optimizer.hpp: LAMB):
//   1. trust_ratio_prepare over every piece of the parameter (on this rank and others): updates
//      the state and returns the piece's sums of squares of the weights and of the update
//      direction u;
//   2. the pieces' sums are added (across ranks: engine/optimizer_store.hpp);
//   3. trust_ratio_apply over every piece with the parameter's step, update.neg_step(sums).
// fused_step does all three for one tensor that is one whole parameter.
//
// The sums are fp64 and their order is fixed by the piece alone: chunks of trust_ratio_chunk
// elements from the piece's start, each summed in 16 interleaved accumulators (position mod 16)
// folded pairwise, chunks added in order. So they do not depend on the thread count, the vector
// width or where the piece sits in memory, and a piece summed on its owning rank (stages 1-3)
// gives the bits it gives inside a whole replica (stage 0). The squares of fp32 values are exact
// in fp64, so contracting them into FMAs changes nothing either.

#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/precision/gradient_element.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace zero {

// Sums of squares over (a piece of) one parameter.
struct ParameterSums {
  double param = 0.0;     // of the weights before the step
  double direction = 0.0; // of the update direction u
  ParameterSums& operator+=(const ParameterSums& o) noexcept {
    param += o.param;
    direction += o.direction;
    return *this;
  }
};

// Elements per chunk of the fixed summation order (a chunk's u stays in the L1 cache).
inline constexpr std::size_t trust_ratio_chunk = 2048;

ZERO_SIMD_BEGIN
namespace detail {

// x[0]^2 + ... + x[n-1]^2 in fp64, in the fixed order described above.
inline double interleaved_sum_of_squares(const float* x, std::size_t n) noexcept {
  constexpr std::size_t lanes = 16;
  double acc[lanes] = {};
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (std::size_t k = 0; k < lanes; ++k) {
      const double d = x[i + k];
      acc[k] += d * d;
    }
  for (std::size_t k = 0; i < n; ++i, ++k) {
    const double d = x[i];
    acc[k] += d * d;
  }
  for (std::size_t width = lanes / 2; width > 0; width /= 2)
    for (std::size_t k = 0; k < width; ++k)
      acc[k] += acc[k + width];
  return acc[0];
}

template <class V, class U, class G, class... Mask>
inline void prepare_lanes(const U& update, const float* master, float* m, float* v, const G* grad,
                          V grad_multiplier, float* direction, std::size_t i, Mask... mask) {
  using L = simd::Lanes<V>;
  const V param = L::load(master + i, mask...);
  const V g = L::load(grad + i, mask...) * grad_multiplier;
  V exp_avg = L::load(m + i, mask...);
  V exp_avg_sq = L::load(v + i, mask...);
  const V u = update.prepare(param, g, exp_avg, exp_avg_sq);
  L::store(m + i, exp_avg, mask...);
  L::store(v + i, exp_avg_sq, mask...);
  L::store(direction + i, u, mask...);
}

// One chunk of n <= trust_ratio_chunk elements: its moments, and its sums.
template <class U, class G>
ParameterSums prepare_chunk(const U& update, const float* master, float* m, float* v, const G* grad,
                            float grad_multiplier, std::size_t n) {
  alignas(64) float direction[trust_ratio_chunk];
  std::size_t i = 0;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using V = simd::vfloat;
  using L = simd::Lanes<V>;
  const V multiplier(grad_multiplier);
  for (; i + L::width <= n; i += L::width)
    prepare_lanes<V>(update, master, m, v, grad, multiplier, direction, i);
#if defined(ZERO_SIMD_AVX512)
  if (i < n) {
    prepare_lanes<V>(update, master, m, v, grad, multiplier, direction, i, L::first(n - i));
    i = n;
  }
#endif
#endif
  for (; i < n; ++i)
    prepare_lanes<float>(update, master, m, v, grad, grad_multiplier, direction, i);
  return {interleaved_sum_of_squares(master, n), interleaved_sum_of_squares(direction, n)};
}

template <class V, class U, class Out, class... Mask>
inline void apply_lanes(const U& update, V neg_step, float* master, const float* m, const float* v,
                        Out* low_precision, std::size_t i, Mask... mask) {
  using L = simd::Lanes<V>;
  V param = L::load(master + i, mask...);
  const V u = update.direction(param, L::load(m + i, mask...), L::load(v + i, mask...));
  param = simd::fma(neg_step, u, param);
  L::store(master + i, param, mask...);
  if (low_precision) L::store(low_precision + i, param, mask...);
}

template <class U, class Out>
void apply_range(const U& update, float neg_step, float* master, const float* m, const float* v,
                 Out* low_precision, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using V = simd::vfloat;
  using L = simd::Lanes<V>;
  const V step(neg_step);
  for (; i + L::width <= end; i += L::width)
    apply_lanes<V>(update, step, master, m, v, low_precision, i);
#if defined(ZERO_SIMD_AVX512)
  if (i < end) {
    apply_lanes<V>(update, step, master, m, v, low_precision, i, L::first(end - i));
    i = end;
  }
#endif
#endif
  for (; i < end; ++i)
    apply_lanes<float>(update, neg_step, master, m, v, low_precision, i);
}

inline void require_piece_size(std::size_t size, std::size_t expected, const char* what) {
  if (size != expected)
    fail(ErrorKind::invalid_argument, std::string("trust ratio step: ") + what + " has " +
                                          std::to_string(size) + " elements, the master weights " +
                                          std::to_string(expected));
}

} // namespace detail
ZERO_SIMD_END

// Pass 1 over one piece of a parameter: updates the state (in the order of the optimizer's
// state_names) and returns the piece's sums of squares. The gradient is multiplied by
// grad_multiplier on the fly, as fused_step does.
template <TrustRatioUpdate U, class G, HostAccessibleSpace Space>
requires GradientElement<std::remove_const_t<G>>
[[nodiscard]] ParameterSums trust_ratio_prepare(const U& update, View<const float, Space> master,
                                                const std::array<View<float, Space>, 2>& state,
                                                View<G, Space> grad, float grad_multiplier = 1.0f) {
  const std::size_t n = master.size();
  for (const auto& s : state)
    detail::require_piece_size(s.size(), n, "an optimizer state tensor");
  detail::require_piece_size(grad.size(), n, "the gradient");
  require(std::isfinite(grad_multiplier),
          "trust ratio step: the gradient multiplier must be finite");
  const std::size_t chunks = (n + trust_ratio_chunk - 1) / trust_ratio_chunk;
  std::vector<ParameterSums> sums(chunks);
  // A chunk belongs to the thread whose range holds its first element.
  detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
    for (std::size_t c = (begin + trust_ratio_chunk - 1) / trust_ratio_chunk;
         c < chunks && c * trust_ratio_chunk < end; ++c) {
      const std::size_t first = c * trust_ratio_chunk;
      const std::size_t count = std::min(trust_ratio_chunk, n - first);
      sums[c] = detail::prepare_chunk(update, master.data() + first, state[0].data() + first,
                                      state[1].data() + first, grad.data() + first, grad_multiplier,
                                      count);
    }
  });
  ParameterSums total;
  for (const ParameterSums& s : sums)
    total += s;
  return total;
}

// Pass 3 over one piece: param += neg_step * u, and the compute copy when one is given.
template <TrustRatioUpdate U, HostAccessibleSpace Space, class Out = half>
requires GradientElement<Out>
void trust_ratio_apply(const U& update, float neg_step, View<float, Space> master,
                       const std::array<View<const float, Space>, 2>& state,
                       View<Out, Space> low_precision = {}) {
  const std::size_t n = master.size();
  for (const auto& s : state)
    detail::require_piece_size(s.size(), n, "an optimizer state tensor");
  if (!low_precision.empty())
    detail::require_piece_size(low_precision.size(), n, "the compute copy");
  require(std::isfinite(neg_step), "trust ratio step: the parameter's step is not finite");
  Out* const copy = low_precision.empty() ? nullptr : low_precision.data();
  detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
    detail::apply_range(update, neg_step, master.data(), state[0].data(), state[1].data(), copy,
                        begin, end);
  });
}

// The whole step on one tensor that is one whole parameter (FusedLamb on one tensor): no other
// rank holds a piece of it.
template <TrustRatioUpdate U, class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void fused_step(const U& update, View<float, Space> master,
                const std::array<View<float, Space>, U::state_tensors>& state, View<G, Space> grad,
                float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  const ParameterSums sums =
      trust_ratio_prepare(update, View<const float, Space>(master), state, grad, grad_multiplier);
  trust_ratio_apply(update, update.neg_step(sums.param, sums.direction), master,
                    {View<const float, Space>(state[0]), View<const float, Space>(state[1])},
                    low_precision);
}

// The same on an execution space (core/execution_space.hpp): the host's threads.
template <TrustRatioUpdate U, class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void fused_step(const HostThreads&, const U& update, View<float, Space> master,
                const std::array<View<float, Space>, U::state_tensors>& state, View<G, Space> grad,
                float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  fused_step(update, master, state, grad, grad_multiplier, low_precision);
}

} // namespace zero
