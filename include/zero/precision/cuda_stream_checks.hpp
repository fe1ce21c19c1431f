#pragma once
// The gradient checks of precision/stream_checks.hpp over CudaStreamSpace: the kernels of
// precision/cuda_checks.hpp launched on the space's stream, with the HostStreamSpace overloads'
// shape, so that code written over StreamSpace checks its gradients on either. The gradients and
// the one-element result slot are device memory; the slot is never cleared by the checks (start it
// at 0), and the host reads it after copying it to pinned host memory (copy(space, slot, pinned))
// and synchronizing on an event recorded after that copy. Arguments are checked at the call, before
// any launch. tests/optim/gpu_stream_test.cpp checks them against the host on a GPU (passed on
// an H100).

// First, so that a build without CUDA hears about this header rather than one it includes.
#include "zero/core/platform.hpp"

#if !ZERO_HAS_CUDA
#error "zero/precision/cuda_stream_checks.hpp needs the CUDA backend: link zero::cuda"
#endif

#include "zero/core/cuda_stream_space.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/precision/cuda_checks.hpp"
#include "zero/precision/gradient_element.hpp"

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

namespace zero {

// Queues: found[0] = 1 when any of `grads` is NaN or infinite.
template <class G>
requires GradientElement<std::remove_const_t<G>>
void flag_nonfinite(const CudaStreamSpace& space, View<G, cuda> grads,
                    View<int, cuda> found_nonfinite) {
  detail::require_result_slot("flag_nonfinite", found_nonfinite.size());
  cuda_kernels::flag_nonfinite(grads.data(), dtype_of<std::remove_const_t<G>>, grads.size(),
                               found_nonfinite.data(), space.stream());
}

// Queues: grads[i] *= factor, and found[0] = 1 when any stored result is NaN or infinite.
template <GradientElement G>
void unscale_and_flag_nonfinite(const CudaStreamSpace& space, View<G, cuda> grads, float factor,
                                View<int, cuda> found_nonfinite) {
  detail::require_result_slot("unscale_and_flag_nonfinite", found_nonfinite.size());
  require(std::isfinite(factor), "unscale_and_flag_nonfinite: the factor must be finite");
  cuda_kernels::unscale_and_flag_nonfinite(grads.data(), dtype_of<G>, grads.size(), factor,
                                           found_nonfinite.data(), space.stream());
}

// Queues: sum[0] += the fp64 sum of squares of `grads` (bits that depend on the size only).
template <class G>
requires GradientElement<std::remove_const_t<G>>
void accumulate_sum_of_squares(const CudaStreamSpace& space, View<G, cuda> grads,
                               View<double, cuda> sum) {
  detail::require_result_slot("accumulate_sum_of_squares", sum.size());
  cuda_kernels::accumulate_sum_of_squares(grads.data(), dtype_of<std::remove_const_t<G>>,
                                          grads.size(), sum.data(), space.stream());
}

} // namespace zero
