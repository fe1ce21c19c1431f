// What bounds the fused Adam step on a GPU: the step (zero::cuda_kernels::fused_step, Adam, fp32
// master weights and moments, 16-bit gradients and compute copy) against, in the same run,
//   traffic: a kernel with the step's memory traffic and no math (3 float4 and one 8-byte load,
//            the same stores, per 4 elements; the step's grid and chunks),
//   copy kernel: a grid-stride float4 copy of the same 28 bytes per element (14 read, 14 written),
//   cudaMemcpy: a device-to-device cudaMemcpyAsync of them (the copy zero_bench_optim_gpu uses),
// and the step over split masters with 8-bit residuals (24 bytes an element), whose bandwidth is
// printed against cudaMemcpy's. On an H100 the step ran at 0.99-1.0 of `traffic` and 0.92-0.93
// of cudaMemcpy, and no SM kernel measured beat 0.936 of cudaMemcpy: the math is hidden and the
// step's ratio to cudaMemcpy is the memory system's for this access pattern (docs/optimizers.md).
// Built by tools/zero-gpu-check pack only (not part of `all`), run as its step adam-bound.
//
//   zero_bench_optim_gpu_bound [--elements=16777216,268435456] [--reps=30]
//
// Prints device and result lines, exits 77 without a device, 1 on a CUDA error.

#include "zero/core/cuda_check.hpp"
#include "zero/core/dtype.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/cuda_step.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int threads = 256;
constexpr double bytes_per_element = 28.0; // 14 read + 14 written
// Split masters (8-bit residuals): weights 2 + residual 1 + moments 8, read and written; gradient
// 2 read.
constexpr double split_bytes_per_element = 24.0;

struct Arrays {
  float* master;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint16_t* grad;
  std::uint16_t* copy;
  std::size_t size;
};

// The step's loads and stores per 4 elements, with one bit flipped so that nothing is elided.
__global__ void __launch_bounds__(threads) traffic_kernel(const Arrays a) {
  constexpr std::size_t chunk = zero::cuda_kernels::step_chunk_elements;
  const std::size_t chunks = (a.size + chunk - 1) / chunk;
  for (std::size_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::size_t end = std::min(a.size, (c + 1) * chunk);
    for (std::size_t i = c * chunk + std::size_t{4} * threadIdx.x; i + 4 <= end;
         i += std::size_t{4} * blockDim.x) {
      float4 p = *reinterpret_cast<const float4*>(a.master + i);
      float4 m = *reinterpret_cast<const float4*>(a.exp_avg + i);
      float4 v = *reinterpret_cast<const float4*>(a.exp_avg_sq + i);
      uint2 g = *reinterpret_cast<const uint2*>(a.grad + i);
      p.x += 1.0f;
      m.y += 1.0f;
      v.z += 1.0f;
      g.x ^= 1u;
      *reinterpret_cast<float4*>(a.master + i) = p;
      *reinterpret_cast<float4*>(a.exp_avg + i) = m;
      *reinterpret_cast<float4*>(a.exp_avg_sq + i) = v;
      *reinterpret_cast<uint2*>(a.copy + i) = g;
    }
  }
}

__global__ void __launch_bounds__(threads)
    copy_kernel(const float4* source, float4* destination, std::size_t count) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    destination[i] = source[i];
}

unsigned resident_grid(const void* kernel) {
  int device = 0;
  int multiprocessors = 0;
  int per_multiprocessor = 0;
  ZERO_CHECK_CUDA(cudaGetDevice(&device));
  ZERO_CHECK_CUDA(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  ZERO_CHECK_CUDA(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, 0));
  return static_cast<unsigned>(multiprocessors * per_multiprocessor);
}

// The median of `reps` timings of body(), each between its own events, all queued, one sync.
template <class Body>
float median_ms(int repetitions, Body&& body) {
  const auto reps = static_cast<std::size_t>(repetitions);
  for (int w = 0; w < 3; ++w)
    body();
  std::vector<cudaEvent_t> events(2 * reps);
  for (cudaEvent_t& event : events)
    ZERO_CHECK_CUDA(cudaEventCreate(&event));
  for (std::size_t r = 0; r < reps; ++r) {
    ZERO_CHECK_CUDA(cudaEventRecord(events[2 * r]));
    body();
    ZERO_CHECK_CUDA(cudaEventRecord(events[2 * r + 1]));
  }
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (std::size_t r = 0; r < reps; ++r)
    ZERO_CHECK_CUDA(cudaEventElapsedTime(&ms[r], events[2 * r], events[2 * r + 1]));
  for (cudaEvent_t event : events)
    ZERO_CHECK_CUDA(cudaEventDestroy(event));
  const auto middle = ms.begin() + static_cast<std::ptrdiff_t>(reps / 2);
  std::nth_element(ms.begin(), middle, ms.end());
  return *middle;
}

void measure(std::size_t n, int reps) {
  std::vector<void*> allocations;
  const auto allocate = [&](std::size_t bytes) {
    void* p = nullptr;
    ZERO_CHECK_CUDA(cudaMalloc(&p, bytes));
    ZERO_CHECK_CUDA(cudaMemset(p, 0, bytes));
    allocations.push_back(p);
    return p;
  };
  const Arrays a{
      static_cast<float*>(allocate(4 * n)),         static_cast<float*>(allocate(4 * n)),
      static_cast<float*>(allocate(4 * n)),         static_cast<std::uint16_t*>(allocate(2 * n)),
      static_cast<std::uint16_t*>(allocate(2 * n)), n};
  ZERO_CHECK_CUDA(cudaMemset(a.grad, 0x3c, 2 * n)); // bfloat16 0x3c3c, a small positive gradient
  void* source = allocate(14 * n);
  void* destination = allocate(14 * n);

  zero::AdamUpdate update{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, -1e-3f, 0.3f, 0.0f, 1.0f, false};
  const zero::cuda_kernels::StepTensor tensor{
      a.master, {a.exp_avg, a.exp_avg_sq}, a.grad, a.copy, nullptr, n};
  const zero::cuda_kernels::StepTypes types{zero::DType::bfloat16, zero::DType::bfloat16};
  const float step = median_ms(reps, [&] {
    zero::cuda_kernels::fused_step(update, {&tensor, 1}, types, 1.0f / 1024, nullptr);
  });
  // Split masters with 8-bit residuals: the compute copy is the masters' high part, read and
  // written, beside one byte of residual: 24 bytes an element instead of 28.
  zero::cuda_kernels::StepTensor split = tensor;
  split.master = nullptr;
  split.residuals = allocate(n); // zeros, as every array here
  const zero::cuda_kernels::StepTypes split_types{zero::DType::bfloat16, zero::DType::bfloat16, 8};
  const float split_step = median_ms(reps, [&] {
    zero::cuda_kernels::fused_step(update, {&split, 1}, split_types, 1.0f / 1024, nullptr);
  });
  const float traffic = median_ms(reps, [&] {
    traffic_kernel<<<resident_grid(reinterpret_cast<const void*>(traffic_kernel)), threads>>>(a);
  });
  const float copy = median_ms(reps, [&] {
    copy_kernel<<<resident_grid(reinterpret_cast<const void*>(copy_kernel)), threads>>>(
        static_cast<const float4*>(source), static_cast<float4*>(destination), 14 * n / 16);
  });
  const float memcpy = median_ms(reps, [&] {
    ZERO_CHECK_CUDA(cudaMemcpyAsync(destination, source, 14 * n, cudaMemcpyDeviceToDevice));
  });
  ZERO_CHECK_CUDA(cudaGetLastError());
  for (void* p : allocations)
    ZERO_CHECK_CUDA(cudaFree(p));
  const auto gbs = [n](float ms) { return bytes_per_element * static_cast<double>(n) / ms / 1e6; };
  std::printf("result adam-bound bfloat16 n=%zu reps=%d: step %.3f ms %.0f GB/s | traffic %.3f ms "
              "%.0f GB/s | copy kernel %.3f ms %.0f GB/s | cudaMemcpy %.3f ms %.0f GB/s | "
              "step/traffic %.3f step/cudaMemcpy %.3f copy-kernel/cudaMemcpy %.3f\n",
              n, reps, step, gbs(step), traffic, gbs(traffic), copy, gbs(copy), memcpy, gbs(memcpy),
              traffic / step, memcpy / step, memcpy / copy);
  const double split_gbs = split_bytes_per_element * static_cast<double>(n) / split_step / 1e6;
  std::printf("result adam-bound-split bfloat16 n=%zu reps=%d: split step (8-bit residuals, %.0f "
              "bytes an element) %.3f ms %.0f GB/s | split/step time %.3f | split GB/s / "
              "cudaMemcpy GB/s %.3f\n",
              n, reps, split_bytes_per_element, split_step, split_gbs, split_step / step,
              split_gbs / gbs(memcpy));
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> elements = {std::size_t{1} << 24, std::size_t{1} << 28};
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    try {
      if (arg.starts_with("--elements=")) {
        elements.clear();
        std::string list(arg.substr(11));
        for (std::size_t at = 0; at < list.size();) {
          const std::size_t comma = std::min(list.find(',', at), list.size());
          elements.push_back(std::stoull(list.substr(at, comma - at)));
          at = comma + 1;
        }
      } else if (arg.starts_with("--reps=")) {
        reps = std::stoi(std::string(arg.substr(7)));
      } else {
        throw std::invalid_argument("unknown");
      }
    } catch (const std::logic_error&) {
      std::fprintf(stderr,
                   "zero_bench_optim_gpu_bound: bad argument '%s'\nusage: "
                   "zero_bench_optim_gpu_bound [--elements=N,...] [--reps=N]\n",
                   argv[i]);
      return 2;
    }
  }
  if (reps < 1 || elements.empty() ||
      std::any_of(elements.begin(), elements.end(),
                  [](std::size_t n) { return n % 4 != 0 || n == 0; })) {
    std::fprintf(stderr, "zero_bench_optim_gpu_bound: --reps >= 1 and element counts positive "
                         "multiples of 4\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  try {
    cudaDeviceProp properties{};
    ZERO_CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
    std::printf("device: %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
    for (std::size_t n : elements)
      measure(n, reps);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero_bench_optim_gpu_bound: %s\n", error.what());
    return 1;
  }
}
