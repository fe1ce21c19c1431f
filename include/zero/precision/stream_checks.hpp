#pragma once
// The gradient checks the optimizer step depends on, over HostStreamSpace: the NaN/infinity check
// (precision/overflow.hpp), the same check fused with the in-place unscale, and the fp64 sum of
// squares the global norm and clipping start from (precision/grad_norm.hpp). They have the shape
// of the CUDA entry points (precision/cuda_checks.hpp; over CudaStreamSpace in
// precision/cuda_stream_checks.hpp): the result is not returned but written, by the queued work,
// into a one-element result slot of the caller's, so that one slot can collect several buffers
// and the host reads it once, after fence() or an event recorded after the checks. A slot read
// before then holds whatever it held before (CI sees that deterministically with a StreamHold).
//
//   flag_nonfinite(space, grads, found)              found[0] = 1 when any element is NaN or
//                                                    infinite; never cleared (start it at 0)
//   unscale_and_flag_nonfinite(space, grads, f, found)   grads[i] *= f, then the same flag
//   accumulate_sum_of_squares(space, grads, sum)     sum[0] += the fp64 sum of squares
//
// Each queued task is the host function itself, so flag and unscaled values are the host's bits,
// and so is the sum for the same OpenMP thread count (the host adds its threads' partial sums in
// thread order; the device adds its blocks', so device and host sums agree to rounding only). The
// views are captured by value: the gradients and the slot behind them must outlive the work.
// Arguments are checked at the call; nothing is queued when they are wrong.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/precision/grad_norm.hpp"
#include "zero/precision/gradient_element.hpp"
#include "zero/precision/overflow.hpp"

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

namespace zero {

namespace detail {

template <class G>
std::string checked_elements(std::size_t n) {
  return std::to_string(n) + " " + to_string(dtype_of<std::remove_const_t<G>>) + " gradients";
}

} // namespace detail

// Queues: found[0] = 1 when any of `grads` is NaN or infinite (has_overflow's test, on the bits).
template <class G, class Space, class SlotSpace, HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && can_access<S, Space> && can_access<S, SlotSpace>
void flag_nonfinite(const S& space, View<G, Space> grads, View<int, SlotSpace> found_nonfinite) {
  detail::require_result_slot("flag_nonfinite", found_nonfinite.size());
  space.stream().enqueue("flag_nonfinite over " + detail::checked_elements<G>(grads.size()),
                         [grads, found_nonfinite] {
                           if (has_overflow(detail::on_worker(grads)))
                             detail::on_worker(found_nonfinite)[0] = 1;
                         });
}

// Queues: grads[i] *= factor, and found[0] = 1 when any stored result is NaN or infinite
// (unscale_and_check's pass). The factor is 1 / loss scale: finite, checked at the call.
template <GradientElement G, class Space, class SlotSpace, HostStreamBased S>
requires can_access<S, Space> && can_access<S, SlotSpace>
void unscale_and_flag_nonfinite(const S& space, View<G, Space> grads, float factor,
                                View<int, SlotSpace> found_nonfinite) {
  detail::require_result_slot("unscale_and_flag_nonfinite", found_nonfinite.size());
  require(std::isfinite(factor), "unscale_and_flag_nonfinite: the factor must be finite");
  space.stream().enqueue("unscale_and_flag_nonfinite over " +
                             detail::checked_elements<G>(grads.size()),
                         [grads, factor, found_nonfinite] {
                           if (unscale_and_check(detail::on_worker(grads), factor))
                             detail::on_worker(found_nonfinite)[0] = 1;
                         });
}

// Queues: sum[0] += sum_of_squares(grads), in fp64 (NaN or infinite when any element is, which
// makes the sum an overflow check too: the engine's single all-reduce relies on that).
template <class G, class Space, class SlotSpace, HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && can_access<S, Space> && can_access<S, SlotSpace>
void accumulate_sum_of_squares(const S& space, View<G, Space> grads, View<double, SlotSpace> sum) {
  detail::require_result_slot("accumulate_sum_of_squares", sum.size());
  space.stream().enqueue(
      "accumulate_sum_of_squares over " + detail::checked_elements<G>(grads.size()),
      [grads, sum] { detail::on_worker(sum)[0] += sum_of_squares(detail::on_worker(grads)); });
}

} // namespace zero
