// Multi-tensor fused optimizer steps. A launch carries up to max_tensors_per_launch tensors, all of
// their chunks, in its kernel argument; its grid is as many blocks as the device holds at once, and
// block b updates chunks b, b + gridDim.x, ... of the launch's chunk sequence (the tensors' chunks
// one after another). A launch of a fixed number of chunks per block, as in apex's and torch's
// multi_tensor_apply (320), left the device two-thirds idle and paid a tail per 320 chunks: the
// H100 measured 0.89-0.93 of copy bandwidth that way. Each thread updates four consecutive elements
// per iteration with 16-byte loads and stores of the fp32 arrays (8-byte for half and bfloat16),
// falling back to element loads for misaligned tensors and for the last elements of a chunk. The
// element-wise math is the optimizer's functor, as on the host. Split masters are read and written
// through master_access.cuh, in the same loop.

#include "dtype_dispatch.cuh"
#include "master_access.cuh"
#include "vector_lanes.cuh"

#include "zero/core/cuda_check.hpp"
#include "zero/optim/cuda_step.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace zero::cuda_kernels {
namespace {

constexpr int max_tensors_per_launch = 24;
constexpr int threads_per_block = 256;
constexpr std::size_t lanes_per_thread = vector_lanes;
// Chunks of one launch: chunk indices are 32-bit.
constexpr std::size_t max_chunks_per_launch = std::size_t{1} << 31;

// The kernel argument (under the 4 KiB parameter limit of older toolkits). Tensor t's chunks are
// [chunk_begin[t], chunk_begin[t + 1]) of the launch's sequence.
struct LaunchBatch {
  StepTensor tensors[max_tensors_per_launch];
  std::uint32_t chunk_begin[max_tensors_per_launch + 1];
  int tensor_count;
};
static_assert(sizeof(LaunchBatch) <= 4000, "a launch batch must fit in a kernel argument");

// f(0), ..., f(N - 1): loops over the optimizer's state tensors, of which there may be none.
template <std::size_t N, class F>
__host__ __device__ void for_each_state(F&& f) {
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (f(K), ...);
  }
  (std::make_index_sequence<N>{});
}

template <class Update>
__device__ void apply(const Update& update, float& param, float grad, float* state) {
  if constexpr (Update::state_tensors == 2)
    update(param, grad, state[0], state[1]);
  else if constexpr (Update::state_tensors == 1)
    update(param, grad, state[0]);
  else
    update(param, grad);
}

template <class Update, class G, class Out, class R>
__device__ void step_chunk(const StepTensor& tensor, const std::size_t begin, const Update& update,
                           const float grad_multiplier) {
  constexpr std::size_t states = Update::state_tensors;
  const std::size_t end =
      tensor.size < begin + step_chunk_elements ? tensor.size : begin + step_chunk_elements;
  const Masters<Out, R> masters(tensor.master, tensor.low_precision, tensor.residuals, 0);
  const G* const grad = static_cast<const G*>(tensor.grad);

  bool aligned = masters.aligned() && aligned_for_lanes<G>(grad);
  for_each_state<states>(
      [&](std::size_t k) { aligned = aligned && aligned_for_lanes<float>(tensor.state[k]); });
  const std::size_t vector_end =
      aligned ? begin + (end - begin) / lanes_per_thread * lanes_per_thread : begin;

  for (std::size_t i = begin + lanes_per_thread * threadIdx.x; i < vector_end;
       i += lanes_per_thread * blockDim.x) {
    float param[lanes_per_thread];
    float g[lanes_per_thread];
    float state[states > 0 ? states : 1][lanes_per_thread];
    masters.load(i, param);
    load_lanes(grad + i, g);
    for_each_state<states>([&](std::size_t k) { load_lanes(tensor.state[k] + i, state[k]); });
#pragma unroll
    for (std::size_t lane = 0; lane < lanes_per_thread; ++lane) {
      float s[states > 0 ? states : 1];
      for_each_state<states>([&](std::size_t k) { s[k] = state[k][lane]; });
      apply(update, param[lane], g[lane] * grad_multiplier, s);
      for_each_state<states>([&](std::size_t k) { state[k][lane] = s[k]; });
    }
    masters.store(i, param);
    for_each_state<states>([&](std::size_t k) { store_lanes(tensor.state[k] + i, state[k]); });
  }
  for (std::size_t i = vector_end + threadIdx.x; i < end; i += blockDim.x) {
    float param = masters.load(i);
    float s[states > 0 ? states : 1];
    for_each_state<states>([&](std::size_t k) { s[k] = tensor.state[k][i]; });
    apply(update, param, static_cast<float>(grad[i]) * grad_multiplier, s);
    masters.store(i, param);
    for_each_state<states>([&](std::size_t k) { tensor.state[k][i] = s[k]; });
  }
}

template <class Update, class G, class Out, class R>
__global__ void __launch_bounds__(threads_per_block)
    step_kernel(const LaunchBatch batch, const Update update, const float grad_multiplier) {
  const std::uint32_t chunks = batch.chunk_begin[batch.tensor_count];
  int t = 0;
  for (std::uint32_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (batch.chunk_begin[t + 1] <= c)
      ++t; // c only grows: the tensor index never goes back
    step_chunk<Update, G, Out, R>(batch.tensors[t],
                                  std::size_t{c - batch.chunk_begin[t]} * step_chunk_elements,
                                  update, grad_multiplier);
  }
}

// Blocks of kernel K the current device runs at once: the grid of a launch. The occupancy is taken
// once per kernel (a template argument, so every instantiation keeps its own) on the first device
// it runs on; another device's multiprocessor count is read at each call. Any grid is correct:
// the blocks stride over the chunks.
template <auto K>
unsigned resident_blocks() {
  int device = 0;
  int multiprocessors = 0;
  ZERO_CHECK_CUDA(cudaGetDevice(&device));
  ZERO_CHECK_CUDA(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  static const int per_multiprocessor = [] {
    int blocks = 0;
    ZERO_CHECK_CUDA(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, K, threads_per_block, 0));
    return blocks;
  }();
  return static_cast<unsigned>(std::max(1, multiprocessors * per_multiprocessor));
}

template <class Update, class G, class Out, class R>
void launch_all(const Update& update, std::span<const StepTensor> tensors, float grad_multiplier,
                cudaStream_t stream) {
  constexpr auto kernel = step_kernel<Update, G, Out, R>;
  const unsigned grid = resident_blocks<kernel>();
  LaunchBatch batch{};
  const auto launch = [&] {
    const std::uint32_t chunks = batch.chunk_begin[batch.tensor_count];
    kernel<<<std::min(grid, chunks), threads_per_block, 0, stream>>>(batch, update,
                                                                     grad_multiplier);
    ZERO_CHECK_CUDA(cudaGetLastError());
    batch.tensor_count = 0;
  };
  for (const StepTensor& tensor : tensors) {
    if (tensor.size == 0) continue;
    const std::size_t chunks = (tensor.size + step_chunk_elements - 1) / step_chunk_elements;
    require(chunks <= max_chunks_per_launch,
            "cuda fused_step: a tensor has more than 2^31 chunks of 2^16 elements");
    if (batch.chunk_begin[batch.tensor_count] + chunks > max_chunks_per_launch) launch();
    const int slot = batch.tensor_count++;
    batch.tensors[slot] = tensor;
    batch.chunk_begin[slot + 1] = static_cast<std::uint32_t>(batch.chunk_begin[slot] + chunks);
    if (batch.tensor_count == max_tensors_per_launch) launch();
  }
  if (batch.tensor_count > 0) launch();
}

template <class Update>
void dispatch(const Update& update, std::span<const StepTensor> tensors, StepTypes types,
              float grad_multiplier, cudaStream_t stream) {
  const bool split = types.residual_bits != 0;
  bool any_copy = false;
  bool all_copy = true;
  for (const StepTensor& t : tensors) {
    if (t.size == 0) continue;
    require(t.grad != nullptr && (split ? t.residuals != nullptr && t.low_precision != nullptr
                                        : t.master != nullptr),
            split ? "cuda fused_step: split masters need every tensor's compute copy and residuals"
                  : "cuda fused_step: a tensor has no master weights or no gradient");
    for_each_state<Update::state_tensors>([&](std::size_t k) {
      require(t.state[k] != nullptr, "cuda fused_step: a tensor lacks an optimizer state tensor");
    });
    any_copy = any_copy || t.low_precision != nullptr;
    all_copy = all_copy && t.low_precision != nullptr;
  }
  require(any_copy == all_copy || !any_copy,
          "cuda fused_step: either every tensor of a call has a compute copy or none has");
  require(std::isfinite(grad_multiplier),
          "cuda fused_step: the gradient multiplier must be finite");

  with_gradient_type(types.grad, "cuda fused_step", [&](auto grad_tag) {
    with_copy_type(types.low_precision, any_copy || split, "cuda fused_step", [&](auto copy_tag) {
      with_residual_type(types.residual_bits, "cuda fused_step", [&](auto residual_tag) {
        using Out = decltype(copy_tag);
        using R = decltype(residual_tag);
        require_step_kernel<decltype(grad_tag), Out, R>("cuda fused_step");
        if constexpr (step_kernel_exists<decltype(grad_tag), Out, R>)
          launch_all<Update, decltype(grad_tag), Out, R>(update, tensors, grad_multiplier, stream);
      });
    });
  });
}

} // namespace

void fused_step(const AdamUpdate& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream) {
  dispatch(update, tensors, types, grad_multiplier, stream);
}
void fused_step(const SgdUpdate<1>& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream) {
  dispatch(update, tensors, types, grad_multiplier, stream);
}
void fused_step(const SgdUpdate<0>& update, std::span<const StepTensor> tensors, StepTypes types,
                float grad_multiplier, cudaStream_t stream) {
  dispatch(update, tensors, types, grad_multiplier, stream);
}

} // namespace zero::cuda_kernels
