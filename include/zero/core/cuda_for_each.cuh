#pragma once
// for_each_index over CudaStreamSpace (zero/core/for_each.hpp): one CUDA thread per index, the
// kernel object passed by value as the launch's argument, queued on the space's stream. Include
// it from a file nvcc compiles (a .cu file): the kernel's call operator must be ZERO_HOST_DEVICE,
// and the launch is instantiated for each kernel type there. Code compiled by the host compiler
// reaches these launches through functions the .cu file instantiates (examples/train_gpt does so).

#include "zero/core/cuda_check.hpp"
#include "zero/core/cuda_stream_space.hpp"
#include "zero/core/for_each.hpp"

#if !defined(__CUDACC__)
#error "zero/core/cuda_for_each.cuh launches kernels: compile this file with nvcc"
#endif

#include <algorithm>
#include <cstddef>

namespace zero {

namespace cuda_kernels {
// A grid-stride loop: any n fits the grid below.
template <class K>
__global__ void for_each_index(std::size_t n, K kernel) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    kernel(i);
}
} // namespace cuda_kernels

template <IndexKernel K>
void for_each_index(const CudaStreamSpace& space, std::size_t n, const K& kernel) {
  if (n == 0) return;
  constexpr unsigned threads = 256;
  // Enough blocks for every index up to 2^31 blocks' worth, and the grid-stride loop beyond.
  const std::size_t blocks = std::min<std::size_t>((n + threads - 1) / threads, 1u << 30);
  cuda_kernels::for_each_index<<<unsigned(blocks), threads, 0, space.stream()>>>(n, kernel);
  ZERO_CHECK_CUDA(cudaGetLastError()); // a failed launch
}

} // namespace zero
