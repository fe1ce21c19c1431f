#pragma once
// Bulk conversions and scaling on the device, stream-ordered (src/cuda/convert.cu), and the same
// conversions along run tables (src/cuda/copy_runs.cu; zero/core/run_table.hpp). The element math
// is zero::half / zero::bfloat16's, the same the host uses.

#include "zero/core/dtype.hpp"
#include "zero/core/platform.hpp"
#include "zero/core/run_table.hpp"

#if ZERO_HAS_CUDA
#include <cuda_runtime_api.h>

#include <concepts>
#include <cstddef>

namespace zero::cuda_kernels {
void convert(const half* src, float* dst, std::size_t n, cudaStream_t stream);
void convert(const float* src, half* dst, std::size_t n, cudaStream_t stream);
void convert(const bfloat16* src, float* dst, std::size_t n, cudaStream_t stream);
void convert(const float* src, bfloat16* dst, std::size_t n, cudaStream_t stream);
// dst[i] += float(src[i]), one correctly rounded addition (accumulate_n's bits)
void accumulate(const float* src, float* dst, std::size_t n, cudaStream_t stream);
void accumulate(const half* src, float* dst, std::size_t n, cudaStream_t stream);
void accumulate(const bfloat16* src, float* dst, std::size_t n, cudaStream_t stream);
// data[i] *= factor
void scale(float* data, std::size_t n, float factor, cudaStream_t stream);
// data[i] /= divisor, correctly rounded (the host's division): NcclCommunicator's average, a sum
// divided by the rank count like the host communicators', not NCCL's pre-multiplied ncclAvg.
void divide(float* data, std::size_t n, float divisor, cudaStream_t stream);
void divide(double* data, std::size_t n, double divisor, cudaStream_t stream);

// The element types the run kernels are compiled for (src/cuda/copy_runs.cu instantiates every
// pair).
template <class T>
concept RunElement = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat16>;

// dst[run.to + i] = convert(src[run.from + i]) for the `count` runs at `runs` (device memory);
// zeros for zero runs.
template <RunElement From, RunElement To>
void convert_runs(const CopyRun* runs, std::size_t count, const From* src, To* dst,
                  cudaStream_t stream);
// dst[run.to + i] += float(src[run.from + i]), one correctly rounded addition; zero runs add
// nothing.
template <RunElement From>
void accumulate_runs(const CopyRun* runs, std::size_t count, const From* src, float* dst,
                     cudaStream_t stream);
} // namespace zero::cuda_kernels
#endif
