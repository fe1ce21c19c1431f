#pragma once
// The GPU tests' staged communicator over the world: two non-blocking streams (the caller's and the
// transfers'), and helpers that write device buffers asynchronously and read them back. Shared by
// tests/gpu/staged_test.cpp and tests/gpu/optimizer_store_test.cpp (one MPI world per binary).

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

namespace zero::testing {

using Staged = zero::StagedCommunicator<zero::CudaStreamSpace, zero::MpiCommunicator>;

struct Streams {
  cudaStream_t caller = nullptr;
  cudaStream_t transfer = nullptr;
  Streams() {
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking));
  }
  ~Streams() {
    ZERO_LOG_CUDA(cudaStreamDestroy(caller));
    ZERO_LOG_CUDA(cudaStreamDestroy(transfer));
  }
};

inline zero::MpiCommunicator& world() {
  static zero::MpiCommunicator comm;
  return comm;
}

struct StagedSetup {
  Streams streams;
  Staged comm{zero::MpiCommunicator(world().boost_communicator()),
              zero::CudaStreamSpace(streams.caller), zero::CudaStreamSpace(streams.transfer)};
  int rank = comm.rank();
  int ranks = comm.size();

  // Writes `host` to `device` on the caller's stream and returns without waiting for it. The
  // pinned source keeps the copy asynchronous (a pageable one may return early too).
  template <class T>
  void write_async(const std::vector<T>& host, zero::Buffer<T, zero::cuda>& device,
                   zero::Buffer<T, zero::pinned_host>& pinned) {
    std::copy(host.begin(), host.end(), pinned.data());
    ZERO_CHECK_CUDA(cudaMemcpyAsync(device.data(), pinned.data(), host.size() * sizeof(T),
                                    cudaMemcpyHostToDevice, streams.caller));
  }
  template <class T>
  std::vector<T> read(const zero::Buffer<T, zero::cuda>& device) {
    std::vector<T> out(device.size());
    ZERO_CHECK_CUDA(
        cudaMemcpy(out.data(), device.data(), out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
};

} // namespace zero::testing
