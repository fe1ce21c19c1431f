#pragma once
// The fused Adam/AdamW step over 8-bit moments on CUDA devices (src/cuda/quantized_step.cu): the
// device counterpart of quantized_fused_step (optim/quantized_step.hpp). One thread block per
// block of quantized_moment_block elements dequantizes the block's two moments, runs the
// AdamUpdate functor on each element (the host's math), takes the block's new absolute maximum
// (a maximum is exact in any order) and quantizes the moments back with the host's scalar
// quantizer (DynamicMapTables::nearest) on the host's map constants, so that the codes, scales,
// master weights and compute copy are the host's bits. Available when zero::cuda is linked.
// tests/optim/gpu_quantized_step_test.cpp checks it against the host on a GPU. Its form over
// CudaStreamSpace has the shape of the HostStreamSpace one (optim/stream_quantized_step.hpp).

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/cuda_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/split_master_rule.hpp"
#include "zero/precision/gradient_element.hpp"

#if ZERO_HAS_CUDA
#include "zero/core/cuda_stream_space.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace zero {

// A moment's codes and block scales in device memory.
using DeviceQuantizedMoment = BasicQuantizedMoment<cuda>;

namespace cuda_kernels {

// One tensor of a multi-tensor 8-bit step, every pointer in device memory; its blocks start at
// its element 0. Split masters (StepTypes::residual_bits) as in StepTensor: `master` unused,
// the masters read from and split into `low_precision` and `residuals`.
struct QuantizedStepTensor {
  float* master = nullptr;
  std::uint8_t* codes[2] = {nullptr, nullptr}; // exp_avg's, exp_avg_sq's
  float* scales[2] = {nullptr, nullptr};       // one per block
  const void* grad = nullptr;                  // StepTypes::grad elements
  void* low_precision = nullptr;               // StepTypes::low_precision elements; null: none
  void* residuals = nullptr;                   // split masters: int8 or int16 elements
  std::size_t size = 0;
};

// Every tensor is updated as quantized_fused_step does on the host.
void quantized_fused_step(const AdamUpdate& update, std::span<const QuantizedStepTensor> tensors,
                          StepTypes types, float grad_multiplier, cudaStream_t stream);

} // namespace cuda_kernels

// The device counterpart of the host quantized_fused_step for one tensor, ordered on `stream`.
template <class G, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void quantized_fused_step(const AdamUpdate& update, View<float, cuda> master,
                          DeviceQuantizedMoment exp_avg, DeviceQuantizedMoment exp_avg_sq,
                          View<G, cuda> grad, float grad_multiplier, View<Out, cuda> low_precision,
                          cudaStream_t stream) {
  const std::size_t n = master.size();
  detail::require_quantized_step_arguments(n, exp_avg, exp_avg_sq, grad.size(),
                                           low_precision.size(), grad_multiplier);
  cuda_kernels::QuantizedStepTensor tensor;
  tensor.master = master.data();
  tensor.codes[0] = exp_avg.codes.data();
  tensor.codes[1] = exp_avg_sq.codes.data();
  tensor.scales[0] = exp_avg.scales.data();
  tensor.scales[1] = exp_avg_sq.scales.data();
  tensor.grad = grad.data();
  tensor.low_precision = low_precision.empty() ? nullptr : low_precision.data();
  tensor.size = n;
  cuda_kernels::quantized_fused_step(
      update, std::span<const cuda_kernels::QuantizedStepTensor>(&tensor, 1),
      {dtype_of<std::remove_const_t<G>>, dtype_of<Out>}, grad_multiplier, stream);
}

// The same over split masters (optim/split_master.hpp): the masters are read from and split
// into master.weights (the compute copy) and master.residuals.
template <class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>>
void quantized_fused_step(const AdamUpdate& update, SplitMasterView<T, R, cuda> master,
                          DeviceQuantizedMoment exp_avg, DeviceQuantizedMoment exp_avg_sq,
                          View<G, cuda> grad, float grad_multiplier, cudaStream_t stream) {
  const std::size_t n = master.size();
  require(master.residuals.size() == n,
          "quantized_fused_step: the residuals and the compute weights differ in size");
  detail::require_quantized_step_arguments(n, exp_avg, exp_avg_sq, grad.size(), n, grad_multiplier);
  cuda_kernels::QuantizedStepTensor tensor;
  tensor.codes[0] = exp_avg.codes.data();
  tensor.codes[1] = exp_avg_sq.codes.data();
  tensor.scales[0] = exp_avg.scales.data();
  tensor.scales[1] = exp_avg_sq.scales.data();
  tensor.grad = grad.data();
  tensor.low_precision = master.weights.data();
  tensor.residuals = master.residuals.data();
  tensor.size = n;
  cuda_kernels::quantized_fused_step(
      update, std::span<const cuda_kernels::QuantizedStepTensor>(&tensor, 1),
      {dtype_of<std::remove_const_t<G>>, dtype_of<T>, 8 * int{sizeof(R)}}, grad_multiplier, stream);
}

// The form over CudaStreamSpace, with the shape of the HostStreamSpace one
// (optim/stream_quantized_step.hpp), so that code written over StreamSpace calls either.
template <class G, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void quantized_fused_step(const CudaStreamSpace& space, const AdamUpdate& update,
                          View<float, cuda> master, DeviceQuantizedMoment exp_avg,
                          DeviceQuantizedMoment exp_avg_sq, View<G, cuda> grad,
                          float grad_multiplier = 1.0f, View<Out, cuda> low_precision = {}) {
  quantized_fused_step(update, master, exp_avg, exp_avg_sq, grad, grad_multiplier, low_precision,
                       space.stream());
}
template <class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>>
void quantized_fused_step(const CudaStreamSpace& space, const AdamUpdate& update,
                          SplitMasterView<T, R, cuda> master, DeviceQuantizedMoment exp_avg,
                          DeviceQuantizedMoment exp_avg_sq, View<G, cuda> grad,
                          float grad_multiplier = 1.0f) {
  quantized_fused_step(update, master, exp_avg, exp_avg_sq, grad, grad_multiplier, space.stream());
}

} // namespace zero
#endif
