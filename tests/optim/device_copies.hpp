#pragma once
// Test helpers of the CUDA optimizer tests: host vectors to device buffers and back, synchronously.

#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/memory_space.hpp>

#include <cuda_runtime_api.h>

#include <vector>

namespace zero::testing {

// `host` in a new device buffer.
template <class T>
Buffer<T, cuda> to_device(const std::vector<T>& host) {
  Buffer<T, cuda> device(host.size(), uninitialized);
  if (!host.empty())
    ZERO_CHECK_CUDA(
        cudaMemcpy(device.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// host.size() elements from `device` into `host`.
template <class T>
void to_host(const T* device, std::vector<T>& host) {
  if (!host.empty())
    ZERO_CHECK_CUDA(
        cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
}

// A device buffer's elements.
template <class T>
std::vector<T> to_host(const Buffer<T, cuda>& device) {
  std::vector<T> host(device.size());
  to_host(device.data(), host);
  return host;
}

} // namespace zero::testing
