#pragma once
// The fused optimizer step over CudaStreamSpace: optim/cuda_step.hpp's stream-ordered launch on the
// space's stream, with the shape of the HostStreamSpace overload (optim/stream_step.hpp), so that
// code written over StreamSpace calls `fused_step(space, update, master, state, grad, multiplier,
// copy)` on either, and `split_fused_step(space, update, split_master, state, grad, multiplier)`
// over split masters. The sizes are checked at the call, before the launch. The kernels exist for
// Adam/AdamW and SGD (with and without momentum) only, and write a float, half or bfloat16 compute
// copy (or none): the constraints below say so at compile time rather than at link time. A float
// copy is written from float gradients only; beside half ones it is refused when called.
// tests/optim/gpu_stream_test.cpp checks it against the host on a GPU (passed on an H100).

// First, so that a build without CUDA hears about this header rather than one it includes.
#include "zero/core/platform.hpp"

#if !ZERO_HAS_CUDA
#error "zero/optim/cuda_stream_step.hpp needs the CUDA backend: link zero::cuda"
#endif

#include "zero/core/cuda_stream_space.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/cuda_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/split_master_rule.hpp"
#include "zero/precision/gradient_element.hpp"

#include <array>
#include <span>
#include <type_traits>

namespace zero {

// Queues master, state and low_precision (empty: no compute copy) updated by `update` from
// grad * grad_multiplier on the space's stream; device memory throughout.
template <ElementwiseUpdate U, class G, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out> &&
    requires(const U& update, std::span<const cuda_kernels::StepTensor> tensors,
             cuda_kernels::StepTypes types, float multiplier, cudaStream_t stream) {
  cuda_kernels::fused_step(update, tensors, types, multiplier, stream);
}
void fused_step(const CudaStreamSpace& space, const U& update, View<float, cuda> master,
                const std::array<View<float, cuda>, U::state_tensors>& state, View<G, cuda> grad,
                float grad_multiplier = 1.0f, View<Out, cuda> low_precision = {}) {
  fused_step(update, master, state, grad, grad_multiplier, low_precision, space.stream());
}

// The same over split masters in device memory (optim/split_master.hpp).
template <ElementwiseUpdate U, class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>> &&
    requires(const U& update, std::span<const cuda_kernels::StepTensor> tensors,
             cuda_kernels::StepTypes types, float multiplier, cudaStream_t stream) {
  cuda_kernels::fused_step(update, tensors, types, multiplier, stream);
}
void split_fused_step(const CudaStreamSpace& space, const U& update,
                      SplitMasterView<T, R, cuda> master,
                      const std::array<View<float, cuda>, U::state_tensors>& state,
                      View<G, cuda> grad, float grad_multiplier = 1.0f) {
  split_fused_step(update, master, state, grad, grad_multiplier, space.stream());
}

} // namespace zero
