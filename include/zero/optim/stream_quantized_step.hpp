#pragma once
// The 8-bit Adam step (optim/quantized_step.hpp) over HostStreamSpace, as optim/stream_step.hpp
// does for the fp32 step: the arguments are checked at the call, and the host step itself is
// queued on the space's stream, so the bytes are the host's and only the time it runs changes
// (after everything queued before it, before what is queued after it). Over DeviceTwinSpace the
// views are device_twin memory, as a device store's are; the CUDA form over CudaStreamSpace is in
// optim/cuda_quantized_step.hpp, so code written over StreamSpace calls
// `quantized_fused_step(space, update, master, exp_avg, exp_avg_sq, grad, multiplier, copy)` on
// either. The views must outlive the step (until fence() or an event recorded after it).

#include "zero/core/dtype.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/quantized_step.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/precision/gradient_element.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

namespace zero {

// Queues master, the two moments' codes and scales, and low_precision (empty: no compute copy)
// updated from grad * grad_multiplier on the space's stream, as quantized_fused_step does at once.
template <class G, class Space, class Out = half, HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out> && can_access<S, Space>
void quantized_fused_step(const S& space, const AdamUpdate& update, View<float, Space> master,
                          BasicQuantizedMoment<Space> exp_avg,
                          BasicQuantizedMoment<Space> exp_avg_sq, View<G, Space> grad,
                          float grad_multiplier = 1.0f, View<Out, Space> low_precision = {}) {
  detail::require_quantized_step_arguments(master.size(), exp_avg, exp_avg_sq, grad.size(),
                                           low_precision.size(), grad_multiplier);
  const auto on_worker = [](const BasicQuantizedMoment<Space>& m) {
    return QuantizedMoment{detail::on_worker(m.codes), detail::on_worker(m.scales)};
  };
  space.stream().enqueue(
      "quantized_fused_step of " + std::to_string(master.size()) + " elements (" +
          to_string(dtype_of<std::remove_const_t<G>>) + " gradients)",
      [update, master, m = on_worker(exp_avg), v = on_worker(exp_avg_sq), grad, grad_multiplier,
       low_precision] {
        quantized_fused_step(update, detail::on_worker(master), m, v, detail::on_worker(grad),
                             grad_multiplier, detail::on_worker(low_precision));
      });
}

// The same over split masters (optim/split_master.hpp), queued on the stream.
template <class G, SplitComputeType T, SplitResidual R, class Space, HostStreamBased S>
requires GradientElement<std::remove_const_t<G>> && can_access<S, Space>
void quantized_fused_step(const S& space, const AdamUpdate& update,
                          SplitMasterView<T, R, Space> master, BasicQuantizedMoment<Space> exp_avg,
                          BasicQuantizedMoment<Space> exp_avg_sq, View<G, Space> grad,
                          float grad_multiplier = 1.0f) {
  detail::require_quantized_step_arguments(master.size(), exp_avg, exp_avg_sq, grad.size(), 0,
                                           grad_multiplier);
  detail::require_same_size(master.residuals.size(), master.size(), "the residual");
  const auto on_worker = [](const BasicQuantizedMoment<Space>& m) {
    return QuantizedMoment{detail::on_worker(m.codes), detail::on_worker(m.scales)};
  };
  space.stream().enqueue(
      "quantized_fused_step of " + std::to_string(master.size()) + " split masters (" +
          to_string(dtype_of<std::remove_const_t<G>>) + " gradients)",
      [update, master, m = on_worker(exp_avg), v = on_worker(exp_avg_sq), grad, grad_multiplier] {
        quantized_fused_step(update,
                             SplitMasterView<T, R>{detail::on_worker(master.weights),
                                                   detail::on_worker(master.residuals)},
                             m, v, detail::on_worker(grad), grad_multiplier);
      });
}

} // namespace zero
