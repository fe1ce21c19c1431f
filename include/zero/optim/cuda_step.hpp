#pragma once
// The fused optimizer step on CUDA devices (src/cuda/optim_step.cu): one stream-ordered launch
// sequence updates many tensors (or shard segments) at once, each split into chunks of
// cuda_kernels::step_chunk_elements, each updated by one thread block with 16-byte vector loads,
// the grid as many blocks as the device holds at once. The element-wise math is the optimizer's
// functor (optim/adam.hpp, optim/sgd.hpp), the same the host loop runs, so host and device give the
// same bits. Available when zero::cuda is linked.
//
// LAMB's passes (src/cuda/lamb_step.cu) follow optim/trust_ratio_step.hpp: lamb_prepare updates
// the moments and writes each chunk's fp64 sums of squares, summed in the host's fixed order, so
// that the caller, adding a tensor's chunk sums in order, gets the host's bits; lamb_apply then
// steps each tensor by its parameter's neg_step. tests/optim/gpu_step_test.cpp compares them with
// the host's bits on a GPU (passed on an H100).

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/lamb.hpp"
#include "zero/optim/sgd.hpp"
#include "zero/optim/split_master_rule.hpp"
#include "zero/optim/trust_ratio_step.hpp"
#include "zero/precision/gradient_element.hpp"

#if ZERO_HAS_CUDA
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>

namespace zero::cuda_kernels {

// One tensor of a multi-tensor step, every pointer in device memory. With split masters
// (StepTypes::residual_bits 8 or 16, optim/split_master.hpp) `master` is unused: the masters are
// read from the compute copy `low_precision` and `residuals`, and split back into both.
struct StepTensor {
  float* master = nullptr;
  float* state[2] = {nullptr, nullptr}; // the optimizer's state tensors in order; unused: null
  const void* grad = nullptr;           // StepTypes::grad elements
  void* low_precision = nullptr;        // StepTypes::low_precision elements; null: no copy
  void* residuals = nullptr;            // split masters: int8 or int16 elements; else null
  std::size_t size = 0;
};

struct StepTypes {
  DType grad = DType::float16;          // float32, float16 or bfloat16
  DType low_precision = DType::float16; // float16 or bfloat16; float32 from float32 gradients
  int residual_bits = 0;                // 0: fp32 masters; 8 or 16: split masters
};

inline constexpr std::size_t step_chunk_elements = std::size_t{1} << 16;

// Every tensor is updated as fused_step (optim/fused_step.hpp) does on the host.
void fused_step(const AdamUpdate& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream);
void fused_step(const SgdUpdate<1>& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream);
void fused_step(const SgdUpdate<0>& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream);

// How many chunks of trust_ratio_chunk elements lamb_prepare cuts a tensor of `size` into.
constexpr std::size_t lamb_chunks(std::size_t size) noexcept {
  return (size + trust_ratio_chunk - 1) / trust_ratio_chunk;
}

// LAMB's first pass over tensors that are pieces of parameters: their moments (state[0], state[1]),
// and in `chunk_sums` (device memory, 2 doubles per chunk of every tensor, the tensors' chunks end
// to end in order) each chunk's sums of squares of the weights and of the update direction.
void lamb_prepare(const LambUpdate& update, std::span<const StepTensor> tensors, StepTypes types,
                  float grad_multiplier, double* chunk_sums, cudaStream_t stream);

// LAMB's last pass: tensor t's weights += neg_steps[t] * u, and their compute copy where the
// tensors have one (StepTypes::low_precision). The gradients are not read.
void lamb_apply(const LambUpdate& update, std::span<const StepTensor> tensors,
                std::span<const float> neg_steps, StepTypes types, cudaStream_t stream);

} // namespace zero::cuda_kernels

namespace zero {

// The device counterpart of the host fused_step for one tensor, ordered on `stream`.
template <ElementwiseUpdate U, class G, class Out = half>
requires GradientElement<std::remove_const_t<G>> && GradientElement<Out>
void fused_step(const U& update, View<float, cuda> master,
                const std::array<View<float, cuda>, U::state_tensors>& state, View<G, cuda> grad,
                float grad_multiplier, View<Out, cuda> low_precision, cudaStream_t stream) {
  const std::size_t n = master.size();
  require(grad.size() == n, "fused_step: the gradient and the master weights differ in size");
  require(low_precision.empty() || low_precision.size() == n,
          "fused_step: the compute copy and the master weights differ in size");
  require(std::isfinite(grad_multiplier), "fused_step: the gradient multiplier must be finite");
  cuda_kernels::StepTensor tensor;
  tensor.master = master.data();
  for (std::size_t k = 0; k < U::state_tensors; ++k) {
    require(state[k].size() == n, "fused_step: an optimizer state tensor differs in size");
    tensor.state[k] = state[k].data();
  }
  tensor.grad = grad.data();
  tensor.low_precision = low_precision.empty() ? nullptr : low_precision.data();
  tensor.size = n;
  cuda_kernels::fused_step(update, std::span<const cuda_kernels::StepTensor>(&tensor, 1),
                           {dtype_of<std::remove_const_t<G>>, dtype_of<Out>}, grad_multiplier,
                           stream);
}

// The same over split masters (optim/split_master.hpp): the masters are read from and split
// into master.weights (the compute copy) and master.residuals.
template <ElementwiseUpdate U, class G, SplitComputeType T, SplitResidual R>
requires GradientElement<std::remove_const_t<G>>
void split_fused_step(const U& update, SplitMasterView<T, R, cuda> master,
                      const std::array<View<float, cuda>, U::state_tensors>& state,
                      View<G, cuda> grad, float grad_multiplier, cudaStream_t stream) {
  const std::size_t n = master.size();
  require(master.residuals.size() == n,
          "split_fused_step: the residuals and the compute weights differ in size");
  require(grad.size() == n, "split_fused_step: the gradient and the master weights differ in size");
  require(std::isfinite(grad_multiplier),
          "split_fused_step: the gradient multiplier must be finite");
  cuda_kernels::StepTensor tensor;
  for (std::size_t k = 0; k < U::state_tensors; ++k) {
    require(state[k].size() == n, "split_fused_step: an optimizer state tensor differs in size");
    tensor.state[k] = state[k].data();
  }
  tensor.grad = grad.data();
  tensor.low_precision = master.weights.data();
  tensor.residuals = master.residuals.data();
  tensor.size = n;
  cuda_kernels::fused_step(update, std::span<const cuda_kernels::StepTensor>(&tensor, 1),
                           {dtype_of<std::remove_const_t<G>>, dtype_of<T>, 8 * int{sizeof(R)}},
                           grad_multiplier, stream);
}

} // namespace zero
#endif
