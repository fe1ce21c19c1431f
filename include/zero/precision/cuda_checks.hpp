#pragma once
// The gradient passes of precision/overflow.hpp and precision/grad_norm.hpp on CUDA devices
// (src/cuda/grad_checks.cu). Results stay on the device, stream-ordered, so that an engine can
// check every bucket, copy one flag and one sum to the host (or all-reduce them with NCCL) and
// synchronise once. Available when zero::cuda is linked.

#include "zero/core/dtype.hpp"
#include "zero/core/platform.hpp"

#if ZERO_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zero::cuda_kernels {

// Sets *found_nonfinite (device memory) to 1 when any of the n elements (float32, float16 or
// bfloat16) is NaN or infinite; never clears it, so one flag can collect several buffers.
void flag_nonfinite(const void* data, DType type, std::size_t n, int* found_nonfinite,
                    cudaStream_t stream);

// data[i] *= factor, and *found_nonfinite = 1 when any stored result is NaN or infinite.
void unscale_and_flag_nonfinite(void* data, DType type, std::size_t n, float factor,
                                int* found_nonfinite, cudaStream_t stream);

// *sum (device memory) += the sum of squares of the n elements, accumulated in fp64 in an order
// that depends on n only (the same bits on every run).
void accumulate_sum_of_squares(const void* data, DType type, std::size_t n, double* sum,
                               cudaStream_t stream);

} // namespace zero::cuda_kernels
#endif
