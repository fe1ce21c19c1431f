#pragma once
// The fused mixed-precision optimizer step on the host: one pass that reads the fp32 master
// weights, the fp32 optimizer state and the gradients (fp32, half or bfloat16), multiplies the
// gradients by `grad_multiplier` (1 / loss scale, times the clipping coefficient), applies the
// optimizer's element-wise update, and writes master weights, state and, optionally, the
// compute copy of the weights (float, half or bfloat16), so that no pass of its own copies them.
//
// The loop runs the optimizer's functor on AVX-512 or AVX2 lanes (the last partial vector under
// a mask with AVX-512, on float lanes otherwise), one contiguous range per OpenMP thread. Every
// lane type rounds identically, so the result does not depend on the vector width, the thread
// count or the alignment of the buffers. The same functor runs in the CUDA kernels
// (optim/cuda_step.hpp). The overloads for optimizers whose step needs whole-parameter norms
// (LAMB) are in optim/trust_ratio_step.hpp, included here so that one call serves both kinds.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/trust_ratio_step.hpp"
#include "zero/precision/gradient_element.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

ZERO_SIMD_BEGIN
namespace detail {

template <class G, class Out, std::size_t N>
struct StepPointers {
  float* master;
  std::array<float*, N> state;
  const G* grad;
  Out* low_precision; // null: no compute copy
};

// How the compute copy is written: not at all, with normal stores, or with non-temporal stores
// (large steps on AVX-512, where the copy would only evict useful lines from the caches).
enum class CopyStores { none, normal, streaming };

// Steps larger than this (in elements) write the compute copy with non-temporal stores.
inline constexpr std::size_t streaming_copy_threshold = std::size_t{1} << 21;

// One lane group at element i: the optional mask selects the lanes of a partial vector.
template <class V, CopyStores Copy, class U, class G, class Out, std::size_t N, std::size_t... I,
          class... Mask>
inline void step_lanes(const U& update, const StepPointers<G, Out, N>& p, std::size_t i,
                       V grad_multiplier, std::index_sequence<I...>, Mask... mask) {
  using L = simd::Lanes<V>;
  V param = L::load(p.master + i, mask...);
  const V grad = L::load(p.grad + i, mask...) * grad_multiplier;
  std::array<V, N> state{L::load(p.state[I] + i, mask...)...};
  update(param, grad, state[I]...);
  L::store(p.master + i, param, mask...);
  (L::store(p.state[I] + i, state[I], mask...), ...);
  if constexpr (Copy == CopyStores::normal) L::store(p.low_precision + i, param, mask...);
#if defined(ZERO_SIMD_AVX512)
  if constexpr (Copy == CopyStores::streaming) L::stream(p.low_precision + i, param);
#endif
}

template <CopyStores Copy, class U, class G, class Out, std::size_t N>
void step_range(const U& update, const StepPointers<G, Out, N>& p, float grad_multiplier,
                std::size_t begin, std::size_t end) {
  constexpr auto state_indices = std::make_index_sequence<N>{};
  // A partial vector and remainders store the copy normally.
  constexpr CopyStores tail_copy = Copy == CopyStores::none ? Copy : CopyStores::normal;
  std::size_t i = begin;
#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
  using V = simd::vfloat;
  using L = simd::Lanes<V>;
  const V multiplier(grad_multiplier);
  for (; i + L::width <= end; i += L::width)
    step_lanes<V, Copy>(update, p, i, multiplier, state_indices);
#if defined(ZERO_SIMD_AVX512)
  if constexpr (Copy == CopyStores::streaming) _mm_sfence();
  if (i < end) {
    step_lanes<V, tail_copy>(update, p, i, multiplier, state_indices, L::first(end - i));
    i = end;
  }
#endif
#endif
  for (; i < end; ++i)
    step_lanes<float, tail_copy>(update, p, i, grad_multiplier, state_indices);
}

inline void require_same_size(std::size_t size, std::size_t expected, const char* what) {
  if (size != expected)
    fail(ErrorKind::invalid_argument, std::string("fused_step: ") + what + " has " +
                                          std::to_string(size) + " elements, the master weights " +
                                          std::to_string(expected));
}

} // namespace detail
ZERO_SIMD_END

// master, state[k] (the optimizer's state tensors, in the order of its state_names), grad and
// low_precision (empty: no compute copy) cover the same elements. `update` comes from the
// optimizer's begin_step(). The caller decides beforehand whether the step happens at all (see
// precision/overflow.hpp): this pass writes unconditionally.
template <ElementwiseUpdate U, class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void fused_step(const U& update, View<float, Space> master,
                const std::array<View<float, Space>, U::state_tensors>& state, View<G, Space> grad,
                float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  const std::size_t n = master.size();
  for (const auto& s : state)
    detail::require_same_size(s.size(), n, "an optimizer state tensor");
  detail::require_same_size(grad.size(), n, "the gradient");
  if (!low_precision.empty())
    detail::require_same_size(low_precision.size(), n, "the compute copy");
  require(std::isfinite(grad_multiplier), "fused_step: the gradient multiplier must be finite");

  using Grad = std::remove_const_t<G>;
  detail::StepPointers<Grad, Out, U::state_tensors> pointers{
      master.data(), {}, grad.data(), low_precision.data()};
  for (std::size_t k = 0; k < U::state_tensors; ++k)
    pointers.state[k] = state[k].data();
  using detail::CopyStores;
  CopyStores copy = low_precision.empty() ? CopyStores::none : CopyStores::normal;
#if defined(ZERO_SIMD_AVX512)
  // Thread ranges start at multiples of 16 elements, so an aligned copy stays aligned.
  if constexpr (LowPrecision<Out>)
    if (copy == CopyStores::normal && n >= detail::streaming_copy_threshold &&
        reinterpret_cast<std::uintptr_t>(low_precision.data()) % 32 == 0)
      copy = CopyStores::streaming;
#endif
  detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
    switch (copy) {
    case CopyStores::none:
      return detail::step_range<CopyStores::none>(update, pointers, grad_multiplier, begin, end);
    case CopyStores::normal:
      return detail::step_range<CopyStores::normal>(update, pointers, grad_multiplier, begin, end);
    case CopyStores::streaming:
      if constexpr (LowPrecision<Out>)
        return detail::step_range<CopyStores::streaming>(update, pointers, grad_multiplier, begin,
                                                         end);
    }
  });
}

// The same step on an execution space (core/execution_space.hpp): the host's threads.
template <ElementwiseUpdate U, class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void fused_step(const HostThreads&, const U& update, View<float, Space> master,
                const std::array<View<float, Space>, U::state_tensors>& state, View<G, Space> grad,
                float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  fused_step(update, master, state, grad, grad_multiplier, low_precision);
}

} // namespace zero
