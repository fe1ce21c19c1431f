// The fused Adam/AdamW step over 8-bit moments. A launch carries up to max_tensors_per_launch
// tensors and both maps' constants in its kernel argument; thread block b updates quantization
// block b of the launch's sequence (the tensors' blocks one after another). Each of the 256
// threads takes two runs of four consecutive elements of the 2048, 1024 apart, so that every
// vector load and store of a warp is contiguous (element by element where the block is partial or
// an array misaligned). A thread reads all of its elements, dequantizes both moments, runs the
// AdamUpdate functor, and keeps the updated moments in registers while the block takes their
// absolute maxima; then it quantizes them with DynamicMapTables::nearest, the host's scalar
// quantizer, from a copy of the maps in shared memory, and writes everything last. The products
// and the reciprocal are written as the round-to-nearest intrinsics, so that no contraction into
// a fused multiply-add can make them differ from the host's. The masters are fp32 or split
// (master_access.cuh).

#include "dtype_dispatch.cuh"
#include "master_access.cuh"
#include "vector_lanes.cuh"

#include "zero/core/cuda_check.hpp"
#include "zero/optim/cuda_quantized_step.hpp"
#include "zero/optim/dynamic_map.hpp"

#include <cfloat>
#include <cstdint>
#include <type_traits>

namespace zero::cuda_kernels {
namespace {

constexpr int max_tensors_per_launch = 12;
constexpr int threads_per_block = 256;
constexpr int elements_per_thread = static_cast<int>(quantized_moment_block) / threads_per_block;
static_assert(std::size_t{elements_per_thread} * threads_per_block == quantized_moment_block);
constexpr int warps_per_block = threads_per_block / 32;
// Blocks of one launch: block indices are 32-bit and a grid's x dimension stops at 2^31 - 1.
constexpr std::size_t max_blocks_per_launch = (std::size_t{1} << 31) - 1;

// The kernel argument (under the 4 KiB parameter limit of older toolkits). Tensor t's blocks are
// [block_begin[t], block_begin[t + 1]) of the launch's sequence.
struct QuantizedBatch {
  DynamicMapTables maps[2]; // exp_avg's (signed), exp_avg_sq's (unsigned)
  QuantizedStepTensor tensors[max_tensors_per_launch];
  std::uint32_t block_begin[max_tensors_per_launch + 1];
  int tensor_count;
};
static_assert(sizeof(QuantizedBatch) <= 4000, "a launch batch must fit in a kernel argument");

// The largest of every thread's `value` in the block, each of the block's threads calling. A
// maximum is exact whatever the order; fmaxf drops a NaN as the host's absolute_maximum does.
__device__ float block_maximum(float value, float (&per_warp)[warps_per_block]) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = value;
  __syncthreads();
  float maximum = 0.0f;
  for (int w = 0; w < warps_per_block; ++w)
    maximum = fmaxf(maximum, per_warp[w]);
  return maximum;
}

// A thread's elements of its block: `groups` runs of vector_lanes consecutive elements, run g
// starting at g x 1024 + 4 x threadIdx.x, so that each vector access of a warp is contiguous.
constexpr int groups = elements_per_thread / static_cast<int>(vector_lanes);
__device__ std::size_t element(int k) {
  const int g = k / static_cast<int>(vector_lanes);
  const int lane = k % static_cast<int>(vector_lanes);
  return std::size_t{threads_per_block} * vector_lanes * g + vector_lanes * threadIdx.x + lane;
}

// A moment's codes from its updated values, as quantize_block does on the host: a block whose
// largest magnitude is below the smallest normal float is kept as zeros with scale 0. Computed
// into registers before anything is stored: a store of bytes may alias the maps in shared memory,
// and would make every later lookup reload them.
__device__ void quantize(const DynamicMapTables& map, const float (&values)[elements_per_thread],
                         float absmax, std::uint8_t (&codes)[elements_per_thread]) {
  const bool normal = absmax >= FLT_MIN;
  const float inverse = normal ? __fdiv_rn(1.0f, absmax) : 0.0f;
#pragma unroll
  for (int k = 0; k < elements_per_thread; ++k)
    codes[k] = map.nearest(normal ? __fmul_rn(values[k], inverse) : 0.0f);
}

template <class G, class Out, class R>
__global__ void __launch_bounds__(threads_per_block)
    quantized_step_kernel(const QuantizedBatch batch, const AdamUpdate update,
                          const float grad_multiplier) {
  __shared__ DynamicMapTables maps[2];
  __shared__ float per_warp[2][warps_per_block];
  {
    constexpr unsigned words = sizeof(maps) / 4; // copied as 32-bit words
    static_assert(sizeof(std::uint32_t) == 4 && sizeof(maps) % 4 == 0);
    const auto* from = reinterpret_cast<const std::uint32_t*>(batch.maps);
    auto* to = reinterpret_cast<std::uint32_t*>(maps);
    for (unsigned w = threadIdx.x; w < words; w += blockDim.x)
      to[w] = from[w];
  }
  __syncthreads();

  const std::uint32_t b = blockIdx.x;
  int t = 0;
  while (batch.block_begin[t + 1] <= b)
    ++t;
  const QuantizedStepTensor& tensor = batch.tensors[t];
  const std::size_t block = b - batch.block_begin[t];
  const std::size_t begin = block * quantized_moment_block;
  const std::size_t rest = tensor.size - begin;
  const std::size_t n = rest < quantized_moment_block ? rest : quantized_moment_block;
  const Masters<Out, R> masters(tensor.master, tensor.low_precision, tensor.residuals, begin);
  const G* const grad = static_cast<const G*>(tensor.grad) + begin;
  std::uint8_t* const codes[2] = {tensor.codes[0] + begin, tensor.codes[1] + begin};
  const float scale[2] = {tensor.scales[0][block], tensor.scales[1][block]};
  // A whole block whose arrays allow vector accesses (the codes 4 bytes at a time); else element
  // by element, the same elements.
  const bool vector = n == quantized_moment_block && masters.aligned() &&
                      aligned_for_lanes<G>(grad) && aligned_for_lanes<std::uint8_t>(codes[0]) &&
                      aligned_for_lanes<std::uint8_t>(codes[1]);

  // Everything read first, then computed, then written.
  float param[elements_per_thread], g[elements_per_thread];
  std::uint8_t code[2][elements_per_thread];
  if (vector) {
#pragma unroll
    for (int r = 0; r < groups; ++r) {
      const std::size_t e = element(r * static_cast<int>(vector_lanes));
      float p[vector_lanes], gr[vector_lanes];
      masters.load(e, p);
      load_lanes(grad + e, gr);
      for (int k = 0; k < 2; ++k) {
        const std::uint32_t four = *reinterpret_cast<const std::uint32_t*>(codes[k] + e);
#pragma unroll
        for (int lane = 0; lane < static_cast<int>(vector_lanes); ++lane)
          code[k][r * vector_lanes + lane] = static_cast<std::uint8_t>(four >> (8 * lane));
      }
#pragma unroll
      for (int lane = 0; lane < static_cast<int>(vector_lanes); ++lane) {
        param[r * vector_lanes + lane] = p[lane];
        g[r * vector_lanes + lane] = gr[lane];
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < elements_per_thread; ++k) {
      const std::size_t i = element(k);
      param[k] = i < n ? masters.load(i) : 0.0f;
      g[k] = i < n ? static_cast<float>(grad[i]) : 0.0f;
      code[0][k] = i < n ? codes[0][i] : 0;
      code[1][k] = i < n ? codes[1][i] : 0;
    }
  }

  float exp_avg[elements_per_thread], exp_avg_sq[elements_per_thread];
  float absmax[2] = {0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < elements_per_thread; ++k) {
    float m = __fmul_rn(maps[0].values[code[0][k]], scale[0]);
    float v = __fmul_rn(maps[1].values[code[1][k]], scale[1]);
    update(param[k], __fmul_rn(g[k], grad_multiplier), m, v);
    exp_avg[k] = m;
    exp_avg_sq[k] = v;
    if (element(k) < n) { // elements past the end count for nothing
      absmax[0] = fmaxf(absmax[0], fabsf(m));
      absmax[1] = fmaxf(absmax[1], fabsf(v));
    }
  }
  const float largest[2] = {block_maximum(absmax[0], per_warp[0]),
                            block_maximum(absmax[1], per_warp[1])};
  quantize(maps[0], exp_avg, largest[0], code[0]);
  quantize(maps[1], exp_avg_sq, largest[1], code[1]);

  if (vector) {
#pragma unroll
    for (int r = 0; r < groups; ++r) {
      const std::size_t e = element(r * static_cast<int>(vector_lanes));
      float p[vector_lanes];
#pragma unroll
      for (int lane = 0; lane < static_cast<int>(vector_lanes); ++lane)
        p[lane] = param[r * vector_lanes + lane];
      masters.store(e, p);
      for (int k = 0; k < 2; ++k) {
        std::uint32_t four = 0;
#pragma unroll
        for (int lane = 0; lane < static_cast<int>(vector_lanes); ++lane)
          four |= std::uint32_t{code[k][r * vector_lanes + lane]} << (8 * lane);
        *reinterpret_cast<std::uint32_t*>(codes[k] + e) = four;
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < elements_per_thread; ++k) {
      const std::size_t i = element(k);
      if (i >= n) continue;
      masters.store(i, param[k]);
      codes[0][i] = code[0][k];
      codes[1][i] = code[1][k];
    }
  }
  // Every thread read the old scales before block_maximum's barrier.
  if (threadIdx.x == 0)
    for (int k = 0; k < 2; ++k)
      tensor.scales[k][block] = largest[k] >= FLT_MIN ? largest[k] : 0.0f;
}

template <class G, class Out, class R>
void launch_all(const AdamUpdate& update, std::span<const QuantizedStepTensor> tensors,
                float grad_multiplier, cudaStream_t stream) {
  QuantizedBatch batch{};
  batch.maps[0] = DynamicMap::signed_map().tables();
  batch.maps[1] = DynamicMap::unsigned_map().tables();
  const auto launch = [&] {
    const std::uint32_t blocks = batch.block_begin[batch.tensor_count];
    quantized_step_kernel<G, Out, R>
        <<<blocks, threads_per_block, 0, stream>>>(batch, update, grad_multiplier);
    ZERO_CHECK_CUDA(cudaGetLastError());
    batch.tensor_count = 0;
  };
  for (const QuantizedStepTensor& tensor : tensors) {
    if (tensor.size == 0) continue;
    const std::size_t blocks = quantized_blocks(tensor.size);
    require(blocks <= max_blocks_per_launch,
            "cuda quantized_fused_step: a tensor has more than 2^31 - 1 blocks of 2048 elements");
    if (batch.block_begin[batch.tensor_count] + blocks > max_blocks_per_launch) launch();
    const int slot = batch.tensor_count++;
    batch.tensors[slot] = tensor;
    batch.block_begin[slot + 1] = static_cast<std::uint32_t>(batch.block_begin[slot] + blocks);
    if (batch.tensor_count == max_tensors_per_launch) launch();
  }
  if (batch.tensor_count > 0) launch();
}

} // namespace

void quantized_fused_step(const AdamUpdate& update, std::span<const QuantizedStepTensor> tensors,
                          StepTypes types, float grad_multiplier, cudaStream_t stream) {
  const bool split = types.residual_bits != 0;
  bool any_copy = false;
  bool all_copy = true;
  for (const QuantizedStepTensor& t : tensors) {
    if (t.size == 0) continue;
    require(t.grad != nullptr && (split ? t.residuals != nullptr && t.low_precision != nullptr
                                        : t.master != nullptr),
            split ? "cuda quantized_fused_step: split masters need every tensor's compute copy "
                    "and residuals"
                  : "cuda quantized_fused_step: a tensor has no master weights or no gradient");
    for (int k = 0; k < 2; ++k)
      require(t.codes[k] != nullptr && t.scales[k] != nullptr,
              "cuda quantized_fused_step: a tensor lacks a moment's codes or scales");
    any_copy = any_copy || t.low_precision != nullptr;
    all_copy = all_copy && t.low_precision != nullptr;
  }
  require(
      any_copy == all_copy || !any_copy,
      "cuda quantized_fused_step: either every tensor of a call has a compute copy or none has");
  require(std::isfinite(grad_multiplier),
          "cuda quantized_fused_step: the gradient multiplier must be finite");
  with_gradient_type(types.grad, "cuda quantized_fused_step", [&](auto grad_tag) {
    with_copy_type(
        types.low_precision, any_copy || split, "cuda quantized_fused_step", [&](auto copy_tag) {
          with_residual_type(types.residual_bits, "cuda quantized_fused_step", [&](auto r_tag) {
            using Out = decltype(copy_tag);
            using R = decltype(r_tag);
            require_step_kernel<decltype(grad_tag), Out, R>("cuda quantized_fused_step");
            if constexpr (step_kernel_exists<decltype(grad_tag), Out, R>)
              launch_all<decltype(grad_tag), Out, R>(update, tensors, grad_multiplier, stream);
          });
        });
  });
}

} // namespace zero::cuda_kernels
