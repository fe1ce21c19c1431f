// Conversions and accumulation along run tables (zero/core/run_table.hpp): each block takes whole
// runs (the table cuts them to RunTable<cuda>::longest_run elements), its threads the elements of
// a run, so one launch moves a whole bucket or layer image whatever its number of runs.

#include "zero/core/cuda_check.hpp"
#include "zero/core/device_convert.hpp"

#include <algorithm>

namespace zero::cuda_kernels {
namespace {

template <class From, class To>
__global__ void convert_runs_kernel(const CopyRun* runs, std::size_t count, const From* src,
                                    To* dst) {
  for (std::size_t r = blockIdx.x; r < count; r += gridDim.x) {
    const CopyRun run = runs[r];
    if (run.from == CopyRun::zeros) {
      for (std::size_t i = threadIdx.x; i < run.length; i += blockDim.x)
        dst[run.to + i] = To{};
    } else {
      for (std::size_t i = threadIdx.x; i < run.length; i += blockDim.x)
        dst[run.to + i] = ::zero::convert<To>(src[run.from + i]);
    }
  }
}

template <class From>
__global__ void accumulate_runs_kernel(const CopyRun* runs, std::size_t count, const From* src,
                                       float* dst) {
  for (std::size_t r = blockIdx.x; r < count; r += gridDim.x) {
    const CopyRun run = runs[r];
    if (run.from == CopyRun::zeros) continue;
    for (std::size_t i = threadIdx.x; i < run.length; i += blockDim.x)
      dst[run.to + i] = __fadd_rn(dst[run.to + i], ::zero::convert<float>(src[run.from + i]));
  }
}

constexpr int threads = 256;
unsigned blocks_for_runs(std::size_t count) {
  return static_cast<unsigned>(std::min<std::size_t>(count, 65535));
}

} // namespace

template <RunElement From, RunElement To>
void convert_runs(const CopyRun* runs, std::size_t count, const From* src, To* dst,
                  cudaStream_t stream) {
  if (count == 0) return;
  convert_runs_kernel<<<blocks_for_runs(count), threads, 0, stream>>>(runs, count, src, dst);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

template <RunElement From>
void accumulate_runs(const CopyRun* runs, std::size_t count, const From* src, float* dst,
                     cudaStream_t stream) {
  if (count == 0) return;
  accumulate_runs_kernel<<<blocks_for_runs(count), threads, 0, stream>>>(runs, count, src, dst);
  ZERO_CHECK_CUDA(cudaGetLastError());
}

// Every pair the header promises.
template void convert_runs(const CopyRun*, std::size_t, const float*, float*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const float*, half*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const float*, bfloat16*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const half*, float*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const half*, half*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const half*, bfloat16*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const bfloat16*, float*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const bfloat16*, half*, cudaStream_t);
template void convert_runs(const CopyRun*, std::size_t, const bfloat16*, bfloat16*, cudaStream_t);
template void accumulate_runs(const CopyRun*, std::size_t, const float*, float*, cudaStream_t);
template void accumulate_runs(const CopyRun*, std::size_t, const half*, float*, cudaStream_t);
template void accumulate_runs(const CopyRun*, std::size_t, const bfloat16*, float*, cudaStream_t);

} // namespace zero::cuda_kernels
