#pragma once
// What the device model's tests share (model_kernels_test.cpp, device_model_test.cpp): the space
// they run on, buffers in its memory reached through its copies only, random inputs, and the
// comparison with the host model's results. ZERO_TEST_CUDA picks CudaStreamSpace and cuda memory
// (the .cu builds, run by tools/zero-gpu-check), otherwise DeviceTwinSpace and device_twin memory
// (in CI).

#include "model_kernels.hpp"

#if ZERO_TEST_CUDA
#include "row_kernels.cuh"

#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_for_each.cuh>
#include <zero/core/cuda_stream_space.hpp>

#include <cuda_runtime_api.h>
#else
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#endif

#include <zero/core/buffer.hpp>
#include <zero/core/for_each.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/view.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace gpt::testing {

// Relative L2 distance allowed between a GPU's result and the host model's (on the twin: none,
// the same bits).
inline constexpr double gpu_bound = 1e-5;

#if ZERO_TEST_CUDA
using Space = zero::CudaStreamSpace;
using Memory = zero::cuda;
// Relative L2 distance allowed between a device's result and the host model's.
inline constexpr double device_bound = gpu_bound;
struct Stream {
  cudaStream_t native = nullptr;
  Stream() { ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking)); }
  ~Stream() { ZERO_LOG_CUDA(cudaStreamDestroy(native)); }
  Space space() const { return Space(native); }
};
#else
using Space = zero::DeviceTwinSpace;
using Memory = zero::device_twin;
struct Stream {
  mutable zero::HostStream native{"model kernels"};
  Space space() const { return Space(native); }
};
#endif

// Buffers in the space's memory, written and read through its copies only.
class Device {
 public:
  template <class T>
  zero::Buffer<T, Memory> upload(const std::vector<T>& host) {
    zero::Buffer<T, Memory> buffer(host.size());
    copy(space_, zero::View<const T>(host.data(), host.size()),
         zero::View<T, Memory>(buffer.data(), buffer.size()));
    space_.fence();
    return buffer;
  }
  template <class T>
  std::vector<T> download(const T* data, std::size_t size) {
    std::vector<T> host(size);
    copy(space_, zero::View<const T, Memory>(data, size), zero::View<T>(host.data(), size));
    space_.fence();
    return host;
  }
  template <class T>
  std::vector<T> download(const zero::Buffer<T, Memory>& buffer) {
    return download(buffer.data(), buffer.size());
  }
  // n indices of an element or strip kernel; n rows of a row kernel.
  template <class K>
  void run(std::size_t n, const K& kernel) {
    if constexpr (gpt::kernels::RowKernel<K>)
      for_each_row(space_, n, kernel);
    else
      zero::for_each_index(space_, n, kernel);
  }
  const Space& space() const { return space_; }

 private:
  Stream stream_;
  Space space_ = stream_.space();
};

inline std::vector<float> random_floats(std::size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v)
    x = normal(rng);
  return v;
}

inline std::vector<std::uint8_t> random_tokens(std::size_t n, std::size_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& t : v)
    t = std::uint8_t(rng() % vocab);
  return v;
}

template <class T>
double relative_l2(const std::vector<T>& got, const std::vector<T>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
    norm += double(want[i]) * double(want[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The device's result against the host model's: the same bits on the twin, within device_bound
// on a GPU (reported either way).
template <class T>
void expect_host_result(const std::vector<T>& device, const std::vector<T>& host,
                        const std::string& what) {
  ASSERT_EQ(device.size(), host.size()) << what;
#if ZERO_TEST_CUDA
  const double error = relative_l2(device, host);
  std::cout << what << ": relative L2 distance to the host model " << error << "\n";
  EXPECT_LE(error, device_bound) << what;
#else
  for (std::size_t i = 0; i < device.size(); ++i)
    if (std::memcmp(&device[i], &host[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << device[i] << " on the twin and "
                    << host[i] << " on the host";
      return;
    }
#endif
}

} // namespace gpt::testing
