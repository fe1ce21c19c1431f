// Element conversions, accumulation into float, scaling and division on the device: grid-stride
// loops over zero::half/bfloat16, whose conversions use the hardware instructions in device code.

#include "zero/core/cuda_check.hpp"
#include "zero/core/device_convert.hpp"

#include <algorithm>

namespace zero::cuda_kernels {
namespace {

template <class From, class To>
__global__ void convert_kernel(const From* src, To* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = ::zero::convert<To>(src[i]);
}

template <class From>
__global__ void accumulate_kernel(const From* src, float* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = __fadd_rn(dst[i], ::zero::convert<float>(src[i])); // never contracted
}

__global__ void scale_kernel(float* data, std::size_t n, float factor) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    data[i] *= factor;
}

__global__ void divide_kernel(float* data, std::size_t n, float divisor) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    data[i] = __fdiv_rn(data[i], divisor);
}

__global__ void divide_kernel(double* data, std::size_t n, double divisor) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    data[i] = __ddiv_rn(data[i], divisor);
}

constexpr int threads = 256;
unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + threads - 1) / threads, 4096));
}

template <class From, class To>
void launch_convert(const From* src, To* dst, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), threads, 0, stream>>>(src, dst, n);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

template <class From>
void launch_accumulate(const From* src, float* dst, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n), threads, 0, stream>>>(src, dst, n);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

} // namespace

void convert(const half* src, float* dst, std::size_t n, cudaStream_t s) {
  launch_convert(src, dst, n, s);
}
void convert(const float* src, half* dst, std::size_t n, cudaStream_t s) {
  launch_convert(src, dst, n, s);
}
void convert(const bfloat16* src, float* dst, std::size_t n, cudaStream_t s) {
  launch_convert(src, dst, n, s);
}
void convert(const float* src, bfloat16* dst, std::size_t n, cudaStream_t s) {
  launch_convert(src, dst, n, s);
}

void accumulate(const float* src, float* dst, std::size_t n, cudaStream_t s) {
  launch_accumulate(src, dst, n, s);
}
void accumulate(const half* src, float* dst, std::size_t n, cudaStream_t s) {
  launch_accumulate(src, dst, n, s);
}
void accumulate(const bfloat16* src, float* dst, std::size_t n, cudaStream_t s) {
  launch_accumulate(src, dst, n, s);
}

void scale(float* data, std::size_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), threads, 0, stream>>>(data, n, factor);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

void divide(float* data, std::size_t n, float divisor, cudaStream_t stream) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n), threads, 0, stream>>>(data, n, divisor);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

void divide(double* data, std::size_t n, double divisor, cudaStream_t stream) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n), threads, 0, stream>>>(data, n, divisor);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

} // namespace zero::cuda_kernels
