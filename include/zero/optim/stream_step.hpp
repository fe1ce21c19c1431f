#pragma once
// The fused optimizer step (optim/fused_step.hpp) over HostStreamSpace: the arguments are checked
// at the call, as a CUDA launch checks its own, and the step is only queued on the space's stream.
// The queued task is the host fused_step itself, so the bits are HostThreads' bits; what changes
// is when it runs: after everything queued on the stream before it (a wait for the producer of the
// gradients included), and before what is queued after it. Its CUDA twin, over CudaStreamSpace, is
// in optim/cuda_stream_step.hpp; code written over StreamSpace calls `fused_step(space, ...)` and
// gets either (and `split_fused_step(space, ...)` over split masters).
//
// The views are captured by value: master, state, gradients and compute copy must outlive the
// step (until fence() or an event recorded after it), as with any asynchronous call. The update
// is copied into the task (an ElementwiseUpdate is trivially copyable), so the optimizer may
// begin its next step while this one is still queued.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/precision/gradient_element.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

namespace zero {

namespace detail {

// The host fused_step's own checks, made before queueing: a mistake fails the call that made it
// (with nothing queued), not a later task on the worker, which would fail the stream instead.
template <std::size_t N, class G, class Out, class Space>
void require_step_arguments(View<float, Space> master,
                            const std::array<View<float, Space>, N>& state, View<G, Space> grad,
                            float grad_multiplier, View<Out, Space> low_precision) {
  const std::size_t n = master.size();
  for (const auto& s : state)
    require_same_size(s.size(), n, "an optimizer state tensor");
  require_same_size(grad.size(), n, "the gradient");
  if (!low_precision.empty()) require_same_size(low_precision.size(), n, "the compute copy");
  require(std::isfinite(grad_multiplier), "fused_step: the gradient multiplier must be finite");
}

} // namespace detail

// Queues master, state and low_precision (empty: no compute copy) updated by `update` from
// grad * grad_multiplier on the space's stream, as fused_step(HostThreads{}, ...) does at once.
template <ElementwiseUpdate U, class G, class Space, class Out = half, HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out> && can_access<S, Space>
void fused_step(const S& space, const U& update, View<float, Space> master,
                const std::array<View<float, Space>, U::state_tensors>& state, View<G, Space> grad,
                float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  detail::require_step_arguments(master, state, grad, grad_multiplier, low_precision);
  space.stream().enqueue("fused_step of " + std::to_string(master.size()) + " elements (" +
                             to_string(dtype_of<std::remove_const_t<G>>) + " gradients)",
                         [update, master, state, grad, grad_multiplier, low_precision] {
                           std::array<View<float>, U::state_tensors> on_host;
                           for (std::size_t i = 0; i < on_host.size(); ++i)
                             on_host[i] = detail::on_worker(state[i]);
                           fused_step(update, detail::on_worker(master), on_host,
                                      detail::on_worker(grad), grad_multiplier,
                                      detail::on_worker(low_precision));
                         });
}

// The same over split masters (optim/split_master.hpp): split_fused_step queued on the stream.
template <ElementwiseUpdate U, class G, SplitComputeType T, SplitResidual R, class Space,
          HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && can_access<S, Space>
void split_fused_step(const S& space, const U& update, SplitMasterView<T, R, Space> master,
                      const std::array<View<float, Space>, U::state_tensors>& state,
                      View<G, Space> grad, float grad_multiplier = 1.0f) {
  detail::require_split_step_arguments(master, state, grad.size(), grad_multiplier);
  space.stream().enqueue("split_fused_step of " + std::to_string(master.size()) + " elements (" +
                             to_string(dtype_of<std::remove_const_t<G>>) + " gradients)",
                         [update, master, state, grad, grad_multiplier] {
                           std::array<View<float>, U::state_tensors> on_host;
                           for (std::size_t i = 0; i < on_host.size(); ++i)
                             on_host[i] = detail::on_worker(state[i]);
                           split_fused_step(
                               update,
                               SplitMasterView<T, R>{detail::on_worker(master.weights),
                                                     detail::on_worker(master.residuals)},
                               on_host, detail::on_worker(grad), grad_multiplier);
                         });
}

} // namespace zero
