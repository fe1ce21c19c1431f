#pragma once
// The fused Adam/AdamW step over 8-bit moments (optim/quantized_moments.hpp): one pass per block
// of 2048 elements that dequantizes the block's two moments into fp32 scratch, runs the same
// element-wise update as the fp32 step (the AdamUpdate functor on the same SIMD lanes, so that
// with the same moments in hand it computes the same bits), and quantizes the updated moments
// back with the block's new absolute maximum, as bitsandbytes' block-wise 8-bit Adam does. The
// master weights and the compute copy are written as by fused_step. Blocks are independent: any
// split of a tensor on block boundaries (ZeRO's shards) gives the same bytes, and threads take
// whole blocks.
//
// The first moment uses the signed map, the second (never negative) the unsigned one.

#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/precision/gradient_element.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace zero {

namespace detail {

// Block `block` of the moments; master, grad and low_precision point at the block's first element.
template <CopyStores Copy, class G, class Out>
void quantized_step_block(const AdamUpdate& update, float* master, QuantizedMoment m,
                          QuantizedMoment v, const G* grad, Out* low_precision,
                          float grad_multiplier, std::size_t block) {
  const DynamicMap& signed_map = DynamicMap::signed_map();
  const DynamicMap& unsigned_map = DynamicMap::unsigned_map();
  const std::size_t begin = block * quantized_moment_block;
  const std::size_t n = std::min(quantized_moment_block, m.size() - begin);
  alignas(64) float exp_avg[quantized_moment_block];
  alignas(64) float exp_avg_sq[quantized_moment_block];
  dequantize_block(signed_map, m.codes.data() + begin, m.scales[block], n, exp_avg);
  dequantize_block(unsigned_map, v.codes.data() + begin, v.scales[block], n, exp_avg_sq);
  const StepPointers<G, Out, 2> p{master, {exp_avg, exp_avg_sq}, grad, low_precision};
  step_range<Copy>(update, p, grad_multiplier, 0, n);
  m.scales[block] = quantize_block(signed_map, exp_avg, n, m.codes.data() + begin);
  v.scales[block] = quantize_block(unsigned_map, exp_avg_sq, n, v.codes.data() + begin);
}

// body(block) for every block of an n-element moment, threads taking whole blocks.
template <class Body>
void for_each_moment_block(std::size_t n, Body&& body) {
  const std::ptrdiff_t blocks = static_cast<std::ptrdiff_t>(quantized_blocks(n));
  const bool threads = n >= parallel_threshold && parallel_max_threads() > 1;
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (threads)
#endif
  for (std::ptrdiff_t b = 0; b < blocks; ++b)
    body(static_cast<std::size_t>(b));
}

} // namespace detail

// master, the two moments (exp_avg, exp_avg_sq), grad and low_precision (empty: no compute copy)
// cover the same elements, the moments' blocks starting at master's element 0. `update` comes
// from Adam's or AdamW's begin_step(). The caller decides beforehand whether the step happens.
template <class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void quantized_fused_step(const AdamUpdate& update, View<float, Space> master,
                          QuantizedMoment exp_avg, QuantizedMoment exp_avg_sq, View<G, Space> grad,
                          float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  const std::size_t n = master.size();
  detail::require_quantized_step_arguments(n, exp_avg, exp_avg_sq, grad.size(),
                                           low_precision.size(), grad_multiplier);
  const auto* g = grad.data();
  Out* copy = low_precision.empty() ? nullptr : low_precision.data();
  detail::for_each_moment_block(n, [&](std::size_t block) {
    const std::size_t at = block * quantized_moment_block;
    if (copy)
      detail::quantized_step_block<detail::CopyStores::normal>(update, master.data() + at, exp_avg,
                                                               exp_avg_sq, g + at, copy + at,
                                                               grad_multiplier, block);
    else
      detail::quantized_step_block<detail::CopyStores::none>(
          update, master.data() + at, exp_avg, exp_avg_sq, g + at, copy, grad_multiplier, block);
  });
}

// The same step over split masters (optim/split_master.hpp): each block's masters are
// reconstructed into fp32 scratch, updated as above, and split into the compute copy and the
// residuals.
template <class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>>
void quantized_fused_step(const AdamUpdate& update, SplitMasterView<T, R> master,
                          QuantizedMoment exp_avg, QuantizedMoment exp_avg_sq, View<G> grad,
                          float grad_multiplier = 1.0f) {
  const std::size_t n = master.size();
  detail::require_quantized_step_arguments(n, exp_avg, exp_avg_sq, grad.size(), 0, grad_multiplier);
  detail::require_same_size(master.residuals.size(), n, "the residual");
  using Grad = std::remove_const_t<G>;
  detail::for_each_moment_block(n, [&](std::size_t block) {
    const std::size_t at = block * quantized_moment_block;
    const std::size_t count = std::min(quantized_moment_block, n - at);
    T* w = master.weights.data() + at;
    R* r = master.residuals.data() + at;
    alignas(64) float masters[quantized_moment_block];
    detail::reconstruct_run(w, r, count, masters);
    detail::quantized_step_block<detail::CopyStores::none, Grad, T>(
        update, masters, exp_avg, exp_avg_sq, grad.data() + at, nullptr, grad_multiplier, block);
    detail::split_run(masters, count, w, r);
  });
}

// The same step on an execution space (core/execution_space.hpp): the host's threads. The stream
// spaces' forms are in optim/stream_quantized_step.hpp and optim/cuda_quantized_step.hpp.
template <class G, HostAccessibleSpace Space, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void quantized_fused_step(const HostThreads&, const AdamUpdate& update, View<float, Space> master,
                          QuantizedMoment exp_avg, QuantizedMoment exp_avg_sq, View<G, Space> grad,
                          float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  quantized_fused_step(update, master, exp_avg, exp_avg_sq, grad, grad_multiplier, low_precision);
}

} // namespace zero
