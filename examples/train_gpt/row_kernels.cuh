#pragma once
// Row kernels (model_kernels.hpp) on a GPU: a warp per row, its 32 threads the row's lanes, so
// that the warp reads 32 neighbouring elements of the row at once (a thread per row would read 32
// rows' elements a row apart). Lane j adds its elements j, j + 32, ... in order and the lanes
// combine by halving through __shfl_xor_sync: the order SerialLanes plays on the host, so the sums
// are those of the host and the twin, bit for bit where the compilers contract alike. Include it
// from a file nvcc compiles, before device_model.hpp's DeviceModel is instantiated.

#include "model_kernels.hpp"

#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>

#if !defined(__CUDACC__)
#error "row_kernels.cuh launches kernels: compile this file with nvcc"
#endif

#include <algorithm>
#include <cstddef>

namespace gpt::kernels {

// Lane `lane` of the warp that runs a row.
struct WarpLanes {
  unsigned lane;

  template <class T, class Term>
  __device__ T sum(std::size_t n, const Term& term) const {
    T partial = T(0);
    for (std::size_t c = lane; c < n; c += lane_count)
      partial += term(c);
    for (unsigned width = lane_count / 2; width > 0; width /= 2)
      partial += __shfl_xor_sync(0xffffffffu, partial, width);
    return partial;
  }
  template <class T, class Term>
  __device__ T max(std::size_t n, const Term& term) const {
    T top = term(0);
    for (std::size_t c = lane; c < n; c += lane_count)
      top = top < term(c) ? term(c) : top;
    for (unsigned width = lane_count / 2; width > 0; width /= 2) {
      const T other = __shfl_xor_sync(0xffffffffu, top, width);
      top = top < other ? other : top;
    }
    return top;
  }
  template <class F>
  __device__ void for_each(std::size_t n, const F& f) const {
    for (std::size_t c = lane; c < n; c += lane_count)
      f(c);
  }
  __device__ bool leader() const { return lane == 0; }
  __device__ void sync() const { __syncwarp(); }
};

namespace device {
// Warp w of the grid runs rows w, w + warps, ...: every lane of a warp takes the same rows, so
// that each shuffle has all 32.
template <class K>
__global__ void each_row(std::size_t rows, K kernel) {
  const std::size_t warps = std::size_t(gridDim.x) * blockDim.x / lane_count;
  const WarpLanes lanes_of_row{threadIdx.x % unsigned(lane_count)};
  for (std::size_t r = (std::size_t(blockIdx.x) * blockDim.x + threadIdx.x) / lane_count; r < rows;
       r += warps)
    kernel(r, lanes_of_row);
}
} // namespace device

// kernel(r, lanes) for every row r < rows, a warp per row, queued on the space's stream.
template <RowKernel K>
void for_each_row(const zero::CudaStreamSpace& space, std::size_t rows, const K& kernel) {
  if (rows == 0) return;
  constexpr unsigned threads = 256; // 8 warps: 8 rows per block
  const std::size_t blocks =
      std::min<std::size_t>((rows * lane_count + threads - 1) / threads, 1u << 30);
  device::each_row<<<unsigned(blocks), threads, 0, space.stream()>>>(rows, kernel);
  ZERO_CHECK_CUDA(cudaGetLastError()); // a failed launch
}

} // namespace gpt::kernels
