// Overflow checks, in-place unscaling and fp64 sums of squares of gradient buffers on the device.
// Grid-stride loops; the flag is set once per block (__syncthreads_or); the sum of squares adds
// per-block partial sums in a second, single-block pass, so that its bits depend on n only. The
// in-place unscale stores the host's bits, NaNs included (docs/optimizers.md).

#include "dtype_dispatch.cuh"

#include "zero/core/cuda_check.hpp"
#include "zero/precision/cuda_checks.hpp"

#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace zero::cuda_kernels {
namespace {

constexpr int threads = 256;
constexpr unsigned max_blocks = 1024;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + threads - 1) / threads, max_blocks));
}

template <class G>
__device__ bool nonfinite(G value) {
  if constexpr (std::is_same_v<G, float>)
    return (__float_as_uint(value) & 0x7f800000u) == 0x7f800000u;
  else if constexpr (std::is_same_v<G, half>)
    return (value.bits & 0x7c00u) == 0x7c00u;
  else
    return (value.bits & 0x7f80u) == 0x7f80u;
}

template <class G>
__global__ void flag_kernel(const G* data, std::size_t n, int* found) {
  bool any = false;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    any = any || nonfinite(data[i]);
  if (__syncthreads_or(any) && threadIdx.x == 0) *found = 1;
}

// value * factor, rounded to G. A NaN keeps its sign and payload and is made quiet, which is what
// the host's multiply gives (x86 and Arm return the NaN operand, quietened, and the host's half and
// bfloat16 conversions keep the payload's top bits); the device's multiply would return its
// canonical NaN (0x7fffffff, stored as half 0x7fff) instead. A NaN the multiply makes itself (a NaN
// factor, or 0 times an infinity) has unspecified bits; factors are 1 / loss scale, finite.
template <class G>
__device__ G unscaled(G value, float factor) {
  if constexpr (std::is_same_v<G, float>) {
    const unsigned bits = __float_as_uint(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(bits | 0x00400000u);
    return __fmul_rn(value, factor);
  } else {
    constexpr unsigned infinity = std::is_same_v<G, half> ? 0x7c00u : 0x7f80u;
    constexpr unsigned quiet = std::is_same_v<G, half> ? 0x0200u : 0x0040u;
    if ((value.bits & 0x7fffu) > infinity)
      return G::from_bits(static_cast<std::uint16_t>(value.bits | quiet));
    return ::zero::convert<G>(__fmul_rn(static_cast<float>(value), factor));
  }
}

template <class G>
__global__ void unscale_kernel(G* data, std::size_t n, float factor, int* found) {
  bool any = false;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const G scaled = unscaled(data[i], factor);
    data[i] = scaled;
    any = any || nonfinite(scaled);
  }
  if (__syncthreads_or(any) && threadIdx.x == 0) *found = 1;
}

template <class G>
__global__ void partial_sums_kernel(const G* data, std::size_t n, double* partial) {
  double sum = 0.0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const double x = static_cast<float>(data[i]);
    sum = __fma_rn(x, x, sum);
  }
  using Reduce = cub::BlockReduce<double, threads>;
  __shared__ typename Reduce::TempStorage storage;
  const double block_sum = Reduce(storage).Sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;
}

__global__ void finish_sum_kernel(const double* partial, unsigned count, double* sum) {
  double s = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
    s += partial[i];
  using Reduce = cub::BlockReduce<double, threads>;
  __shared__ typename Reduce::TempStorage storage;
  const double total = Reduce(storage).Sum(s);
  if (threadIdx.x == 0) *sum += total;
}

} // namespace

void flag_nonfinite(const void* data, DType type, std::size_t n, int* found_nonfinite,
                    cudaStream_t stream) {
  if (n == 0) return;
  with_gradient_type(type, "flag_nonfinite", [&](auto tag) {
    using G = decltype(tag);
    flag_kernel<<<blocks_for(n), threads, 0, stream>>>(static_cast<const G*>(data), n,
                                                       found_nonfinite);
  });
  ZERO_CHECK_CUDA(cudaGetLastError());
}

void unscale_and_flag_nonfinite(void* data, DType type, std::size_t n, float factor,
                                int* found_nonfinite, cudaStream_t stream) {
  if (n == 0) return;
  with_gradient_type(type, "unscale_and_flag_nonfinite", [&](auto tag) {
    using G = decltype(tag);
    unscale_kernel<<<blocks_for(n), threads, 0, stream>>>(static_cast<G*>(data), n, factor,
                                                          found_nonfinite);
  });
  ZERO_CHECK_CUDA(cudaGetLastError());
}

void accumulate_sum_of_squares(const void* data, DType type, std::size_t n, double* sum,
                               cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n);
  void* partial = nullptr;
  ZERO_CHECK_CUDA(cudaMallocAsync(&partial, blocks * sizeof(double), stream));
  with_gradient_type(type, "accumulate_sum_of_squares", [&](auto tag) {
    using G = decltype(tag);
    partial_sums_kernel<<<blocks, threads, 0, stream>>>(static_cast<const G*>(data), n,
                                                        static_cast<double*>(partial));
  });
  ZERO_CHECK_CUDA(cudaGetLastError());
  finish_sum_kernel<<<1, threads, 0, stream>>>(static_cast<const double*>(partial), blocks, sum);
  ZERO_CHECK_CUDA(cudaGetLastError());
  ZERO_CHECK_CUDA(cudaFreeAsync(partial, stream));
}

} // namespace zero::cuda_kernels
