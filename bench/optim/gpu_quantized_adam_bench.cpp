// The CUDA 8-bit Adam step (optim/cuda_quantized_step.hpp) against the fp32 fused step and a
// device-to-device copy, on the same elements, bfloat16 gradients and compute copy:
//
//   zero_bench_optim_gpu_8bit [--elements=16777216,268435456] [--reps=30]
//
//   8-bit step: read master 4 + codes 2 + grad 2, write master 4 + codes 2 + copy 2 (the scales,
//               8 bytes per 2048 elements, left out): 16 bytes per element;
//   fp32 step:  28 bytes per element (bench/optim/gpu_adam_bench.cpp);
//   copy:       cudaMemcpyAsync of 8 bytes per element, counted read + write: 16.
//
// Each rep queues the three after one another with events between them; medians of the reps.
// A plain main (no Google Benchmark); exits 77 without a device.

#include <zero/core/bfloat16.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_quantized_step.hpp>
#include <zero/optim/cuda_step.hpp>
#include <zero/optim/quantized_moments.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

using zero::bfloat16;

struct Options {
  std::vector<std::size_t> elements = {std::size_t{1} << 24, std::size_t{1} << 28};
  int reps = 30;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--elements=")) {
      options.elements.clear();
      std::string list(arg.substr(11));
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        options.elements.push_back(std::stoull(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (arg.starts_with("--reps=")) {
      options.reps = std::stoi(std::string(arg.substr(7)));
    } else {
      std::fprintf(stderr, "usage: zero_bench_optim_gpu_8bit [--elements=N,...] [--reps=N]\n");
      std::exit(2);
    }
  }
  if (options.reps < 1 || options.elements.empty()) {
    std::fprintf(stderr, "zero_bench_optim_gpu_8bit: --reps must be >= 1, --elements non-empty\n");
    std::exit(2);
  }
  return options;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void time_one(std::size_t n, int reps, cudaStream_t stream) {
  zero::Buffer<float, zero::cuda> master(n, zero::uninitialized), exp_avg(n, zero::uninitialized),
      exp_avg_sq(n, zero::uninitialized);
  zero::Buffer<bfloat16, zero::cuda> grad(n, zero::uninitialized), copy(n, zero::uninitialized);
  zero::Buffer<std::uint8_t, zero::cuda> codes_m(n, zero::uninitialized),
      codes_v(n, zero::uninitialized);
  const std::size_t blocks = zero::quantized_blocks(n);
  zero::Buffer<float, zero::cuda> scales_m(blocks, zero::uninitialized),
      scales_v(blocks, zero::uninitialized);
  zero::Buffer<std::byte, zero::cuda> source(n * 8, zero::uninitialized),
      destination(n * 8, zero::uninitialized);
  // Finite, normal values (0x3C3C3C3C is 0.0115f; 0x3C3C is 0.0115 in bfloat16); codes 0x80..
  // and scales 0.0115 are moments of that size.
  for (auto* b : {&master, &exp_avg, &exp_avg_sq, &scales_m, &scales_v})
    ZERO_CHECK_CUDA(cudaMemset(b->data(), 0x3C, b->size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(grad.data(), 0x3C, grad.size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(codes_m.data(), 0xC0, n));
  ZERO_CHECK_CUDA(cudaMemset(codes_v.data(), 0xC0, n));
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  const zero::AdamUpdate update = zero::Adam().update_for_step(10);
  const zero::View<const bfloat16, zero::cuda> g(grad.data(), n);
  const auto eight_bit = [&] {
    zero::quantized_fused_step(update, master.view(), {codes_m.view(), scales_m.view()},
                               {codes_v.view(), scales_v.view()}, g, 1.0f, copy.view(), stream);
  };
  const auto fp32 = [&] {
    zero::fused_step(update, master.view(), {exp_avg.view(), exp_avg_sq.view()}, g, 1.0f,
                     copy.view(), stream);
  };
  const auto copy_bytes = [&] {
    ZERO_CHECK_CUDA(cudaMemcpyAsync(destination.data(), source.data(), source.size_bytes(),
                                    cudaMemcpyDeviceToDevice, stream));
  };
  for (int i = 0; i < 3; ++i) {
    eight_bit();
    fp32();
    copy_bytes();
  }
  std::vector<cudaEvent_t> events(3 * static_cast<std::size_t>(reps) + 1);
  for (auto& e : events)
    ZERO_CHECK_CUDA(cudaEventCreate(&e));
  ZERO_CHECK_CUDA(cudaEventRecord(events[0], stream));
  for (int r = 0; r < reps; ++r) {
    const std::size_t at = 3 * static_cast<std::size_t>(r);
    eight_bit();
    ZERO_CHECK_CUDA(cudaEventRecord(events[at + 1], stream));
    fp32();
    ZERO_CHECK_CUDA(cudaEventRecord(events[at + 2], stream));
    copy_bytes();
    ZERO_CHECK_CUDA(cudaEventRecord(events[at + 3], stream));
  }
  ZERO_CHECK_CUDA(cudaEventSynchronize(events.back()));
  std::vector<double> ms[3];
  for (int r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < 3; ++k) {
      const std::size_t at = 3 * static_cast<std::size_t>(r) + k;
      float t = 0;
      ZERO_CHECK_CUDA(cudaEventElapsedTime(&t, events[at], events[at + 1]));
      ms[k].push_back(t);
    }
  for (auto& e : events)
    ZERO_CHECK_CUDA(cudaEventDestroy(e));
  ZERO_CHECK_CUDA(cudaGetLastError());
  const double eight = median(ms[0]), full = median(ms[1]), copied = median(ms[2]);
  const auto gbs = [n](double bytes, double t) {
    return bytes * static_cast<double>(n) / (t * 1e-3) / 1e9;
  };
  std::printf("result adam-8bit bfloat16 n=%zu reps=%d: 8-bit step %.3f ms %.1f GB/s of 16 B/elem "
              "| fp32 step %.3f ms %.1f GB/s of 28 | copy %.3f ms %.1f GB/s | 8-bit against "
              "copy %.3f, 8-bit time / fp32 time %.3f\n",
              n, reps, eight, gbs(16, eight), full, gbs(28, full), copied, gbs(16, copied),
              gbs(16, eight) / gbs(16, copied), eight / full);
}

} // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping the GPU 8-bit Adam benchmark\n");
    return 77;
  }
  try {
    cudaDeviceProp properties{};
    ZERO_CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
    std::printf("device: %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
    cudaStream_t stream = nullptr;
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (const std::size_t n : options.elements) {
      std::size_t free_bytes = 0, total_bytes = 0;
      ZERO_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
      if (static_cast<double>(n) * 38.0 > 0.95 * static_cast<double>(free_bytes)) {
        std::printf("skipped n=%zu: needs %.1f GB of device memory\n", n,
                    static_cast<double>(n) * 38.0 / 1e9);
        continue;
      }
      time_one(n, options.reps, stream);
    }
    ZERO_CHECK_CUDA(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::printf("zero_bench_optim_gpu_8bit: error: %s\n", e.what());
    return 1;
  }
}
