// LAMB's two element-wise passes on the device, in the launch style of optim_step.cu: a launch
// carries up to max_tensors_per_launch tensors and max_blocks_per_launch blocks in its kernel
// argument, each block one chunk of trust_ratio_chunk elements of one tensor. The math is
// LambUpdate's, as on the host (optim/trust_ratio_step.hpp), and so is the order of the sums:
// the 16 interleaved fp64 accumulators of a chunk become 16 threads, each adding its lane's
// elements in order, folded pairwise by one thread. Elements are loaded one at a time (no 16-byte
// vectors yet): they give the host's bits on an H100, and have not been measured.

#include "dtype_dispatch.cuh"

#include "zero/core/cuda_check.hpp"
#include "zero/optim/cuda_step.hpp"

#include <cstdint>
#include <string>

namespace zero::cuda_kernels {
namespace {

constexpr int max_tensors_per_launch = 24;
constexpr int max_blocks_per_launch = 320;
constexpr int threads_per_block = 256;
constexpr int sum_lanes = 16; // the host's interleaved accumulators

struct LambBatch {
  StepTensor tensors[max_tensors_per_launch];
  float neg_step[max_tensors_per_launch];            // lamb_apply
  std::uint32_t first_chunk[max_tensors_per_launch]; // lamb_prepare: the tensor's first sum slot
  std::uint8_t block_tensor[max_blocks_per_launch];
  std::uint32_t block_chunk[max_blocks_per_launch];
};
static_assert(sizeof(LambBatch) <= 4000, "a launch batch must fit in a kernel argument");

template <class G>
__global__ void __launch_bounds__(threads_per_block)
    lamb_prepare_kernel(const LambBatch batch, const LambUpdate update, const float grad_multiplier,
                        double* const chunk_sums) {
  __shared__ float weights[trust_ratio_chunk];
  __shared__ float directions[trust_ratio_chunk];
  __shared__ double lanes[2][sum_lanes];
  const int slot = batch.block_tensor[blockIdx.x];
  const StepTensor& tensor = batch.tensors[slot];
  const std::size_t chunk = batch.block_chunk[blockIdx.x];
  const std::size_t begin = chunk * trust_ratio_chunk;
  const std::size_t n =
      tensor.size - begin < trust_ratio_chunk ? tensor.size - begin : trust_ratio_chunk;
  const G* const grad = static_cast<const G*>(tensor.grad);
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::size_t at = begin + i;
    const float param = tensor.master[at];
    float exp_avg = tensor.state[0][at];
    float exp_avg_sq = tensor.state[1][at];
    directions[i] =
        update.prepare(param, static_cast<float>(grad[at]) * grad_multiplier, exp_avg, exp_avg_sq);
    weights[i] = param;
    tensor.state[0][at] = exp_avg;
    tensor.state[1][at] = exp_avg_sq;
  }
  __syncthreads();
  if (threadIdx.x < sum_lanes) {
    double w = 0.0;
    double u = 0.0;
    for (std::size_t i = threadIdx.x; i < n; i += sum_lanes) {
      const double x = weights[i];
      const double y = directions[i];
      w += x * x; // exact products: contracting them into FMAs changes nothing
      u += y * y;
    }
    lanes[0][threadIdx.x] = w;
    lanes[1][threadIdx.x] = u;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int width = sum_lanes / 2; width > 0; width /= 2)
      for (int k = 0; k < width; ++k) {
        lanes[0][k] += lanes[0][k + width];
        lanes[1][k] += lanes[1][k + width];
      }
    double* const out = chunk_sums + 2 * (batch.first_chunk[slot] + chunk);
    out[0] = lanes[0][0];
    out[1] = lanes[1][0];
  }
}

template <class Out>
__global__ void __launch_bounds__(threads_per_block)
    lamb_apply_kernel(const LambBatch batch, const LambUpdate update) {
  const int slot = batch.block_tensor[blockIdx.x];
  const StepTensor& tensor = batch.tensors[slot];
  const float neg_step = batch.neg_step[slot];
  const std::size_t begin = std::size_t{batch.block_chunk[blockIdx.x]} * trust_ratio_chunk;
  const std::size_t end =
      tensor.size < begin + trust_ratio_chunk ? tensor.size : begin + trust_ratio_chunk;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float param = tensor.master[i];
    const float u = update.direction(param, tensor.state[0][i], tensor.state[1][i]);
    param = simd::fma(neg_step, u, param);
    tensor.master[i] = param;
    if constexpr (!std::is_same_v<Out, NoCopy>)
      static_cast<Out*>(tensor.low_precision)[i] = Out(param);
  }
}

// Calls launch(batch, blocks) for every batch of tensors and chunks, as optim_step.cu batches them;
// prepare(batch, slot, t) fills what a tensor's slot carries besides the tensor.
template <class Prepare, class Launch>
void for_each_batch(std::span<const StepTensor> tensors, Prepare&& prepare, Launch&& launch) {
  LambBatch batch{};
  int tensor_slot = 0;
  int blocks = 0;
  const auto flush = [&] {
    launch(batch, blocks);
    blocks = 0;
  };
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const StepTensor& tensor = tensors[t];
    if (tensor.size == 0) continue;
    batch.tensors[tensor_slot] = tensor;
    prepare(batch, tensor_slot, t);
    for (std::size_t chunk = 0; chunk < lamb_chunks(tensor.size); ++chunk) {
      batch.block_tensor[blocks] = static_cast<std::uint8_t>(tensor_slot);
      batch.block_chunk[blocks] = static_cast<std::uint32_t>(chunk);
      if (++blocks == max_blocks_per_launch) {
        flush();
        batch.tensors[0] = tensor; // the rest of its chunks go into the next launch
        prepare(batch, 0, t);
        tensor_slot = 0;
      }
    }
    if (blocks == 0) continue; // launched with its last chunk: slot 0 is free again
    if (++tensor_slot == max_tensors_per_launch) {
      flush();
      tensor_slot = 0;
    }
  }
  if (blocks > 0) flush();
}

void require_lamb_tensors(std::span<const StepTensor> tensors) {
  for (const StepTensor& t : tensors)
    if (t.size != 0)
      require(t.master != nullptr && t.state[0] != nullptr && t.state[1] != nullptr,
              "cuda lamb: a tensor lacks its master weights or a moment");
}

} // namespace

void lamb_prepare(const LambUpdate& update, std::span<const StepTensor> tensors, StepTypes types,
                  float grad_multiplier, double* chunk_sums, cudaStream_t stream) {
  require_lamb_tensors(tensors);
  require(std::isfinite(grad_multiplier), "cuda lamb: the gradient multiplier must be finite");
  std::vector<std::uint32_t> first(tensors.size(), 0);
  std::size_t chunks = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    require(tensors[t].size == 0 || tensors[t].grad != nullptr,
            "cuda lamb: a tensor has no gradient");
    first[t] = static_cast<std::uint32_t>(chunks);
    chunks += lamb_chunks(tensors[t].size);
  }
  require(chunks == 0 || chunk_sums != nullptr, "cuda lamb: no memory for the chunk sums");
  with_gradient_type(types.grad, "cuda lamb", [&](auto grad_tag) {
    using G = decltype(grad_tag);
    for_each_batch(
        tensors,
        [&](LambBatch& batch, int slot, std::size_t t) { batch.first_chunk[slot] = first[t]; },
        [&](const LambBatch& batch, int blocks) {
          lamb_prepare_kernel<G><<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(
              batch, update, grad_multiplier, chunk_sums);
          ZERO_CHECK_CUDA(cudaGetLastError());
        });
  });
}

void lamb_apply(const LambUpdate& update, std::span<const StepTensor> tensors,
                std::span<const float> neg_steps, StepTypes types, cudaStream_t stream) {
  require_lamb_tensors(tensors);
  require(neg_steps.size() == tensors.size(), "cuda lamb: one step per tensor");
  bool any_copy = false;
  bool all_copy = true;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].size == 0) continue;
    require(std::isfinite(neg_steps[t]), "cuda lamb: a parameter's step is not finite");
    any_copy = any_copy || tensors[t].low_precision != nullptr;
    all_copy = all_copy && tensors[t].low_precision != nullptr;
  }
  require(any_copy == all_copy || !any_copy,
          "cuda lamb: either every tensor of a call has a compute copy or none has");
  with_copy_type(types.low_precision, any_copy, "cuda lamb", [&](auto copy_tag) {
    using Out = decltype(copy_tag);
    for_each_batch(
        tensors,
        [&](LambBatch& batch, int slot, std::size_t t) { batch.neg_step[slot] = neg_steps[t]; },
        [&](const LambBatch& batch, int blocks) {
          lamb_apply_kernel<Out>
              <<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(batch, update);
          ZERO_CHECK_CUDA(cudaGetLastError());
        });
  });
}

} // namespace zero::cuda_kernels
