#pragma once
// The device tests' staged communicator over the world: two streams (the caller's and the
// transfers'), and helpers that write device buffers asynchronously and read them back. Shared by
// the tests of this folder (one MPI world per binary).
//
// The same sources build twice: against CUDA (label gpu: CudaStreamSpace, cuda memory, run by
// tools/zero-gpu-check) and, with ZERO_TEST_TWIN, against the CPU twin (DeviceTwinSpace over
// device_twin memory, in CI on every commit). Written over `DeviceSpace` and `DeviceMemory`, a test
// reaches its device buffers only through the space's copies, so what passes over the twin is the
// device code with only the hardware left to try.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/view.hpp>

#if ZERO_TEST_TWIN
#include "comm_test.hpp" // world(), released by the MPI tests' main before MPI is finalised

#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#else
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>

#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <vector>

namespace zero::testing {

#if ZERO_TEST_TWIN
using DeviceSpace = zero::DeviceTwinSpace;
using DeviceMemory = zero::device_twin;
// caller: the communicator's caller stream; transfer: its copies; compute: a stream of the code
// under test that is not the communicator's caller (which must then point it at its own).
struct Streams {
  zero::HostStream caller{"caller"};
  zero::HostStream transfer{"transfer"};
  zero::HostStream compute{"compute"};
};
#else
using DeviceSpace = zero::CudaStreamSpace;
using DeviceMemory = zero::cuda;
struct Streams {
  cudaStream_t caller = nullptr;
  cudaStream_t transfer = nullptr;
  cudaStream_t compute = nullptr;
  Streams() {
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking));
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  }
  ~Streams() {
    ZERO_LOG_CUDA(cudaStreamDestroy(caller));
    ZERO_LOG_CUDA(cudaStreamDestroy(transfer));
    ZERO_LOG_CUDA(cudaStreamDestroy(compute));
  }
};
#endif

using Staged = zero::StagedCommunicator<DeviceSpace, zero::MpiCommunicator>;

#if !ZERO_TEST_TWIN
inline zero::MpiCommunicator& world() {
  static zero::MpiCommunicator comm;
  return comm;
}
#endif

struct StagedSetup {
  Streams streams;
  Staged comm{zero::MpiCommunicator(world().boost_communicator()), DeviceSpace(streams.caller),
              DeviceSpace(streams.transfer)};
  int rank = comm.rank();
  int ranks = comm.size();

  DeviceSpace caller() { return DeviceSpace(streams.caller); }
  DeviceSpace compute() { return DeviceSpace(streams.compute); }

  // Writes `host` to `device` on the caller's stream and returns without waiting for it. The
  // pinned source keeps the copy asynchronous (a pageable one may return early too).
  template <class T>
  void write_async(const std::vector<T>& host, zero::Buffer<T, DeviceMemory>& device,
                   zero::Buffer<T, zero::pinned_host>& pinned) {
    std::copy(host.begin(), host.end(), pinned.data());
    copy(caller(), zero::View<const T, zero::pinned_host>(pinned.data(), host.size()),
         device.view().first(host.size()));
  }
  // `host` in a new device buffer, there for every stream on return.
  template <class T>
  zero::Buffer<T, DeviceMemory> upload(const std::vector<T>& host) {
    zero::Buffer<T, DeviceMemory> device(host.size(), zero::uninitialized);
    copy(caller(), zero::View<const T>(host), device.view());
    caller().fence();
    return device;
  }
  // The device buffer's values, after the work queued on the caller's stream.
  template <class T>
  std::vector<T> read(const zero::Buffer<T, DeviceMemory>& device) {
    std::vector<T> out(device.size());
    copy(caller(), device.view(), zero::View<T>(out));
    caller().fence();
    return out;
  }
};

// Over the twin, with `held`: while it lives, the compute stream runs a task only once something
// waits for it (HostStream::defer_until_waited): as late as the waits of the code under test allow,
// so that work ordered after it without a wait runs before it and reads stale data, every run,
// whatever the machine's speed. Code under test may synchronize on the stream meanwhile. On a GPU
// it does nothing.
class ComputeHold {
 public:
  ComputeHold([[maybe_unused]] StagedSetup& s, [[maybe_unused]] bool held) {
#if ZERO_TEST_TWIN
    if (held) {
      stream_ = &s.streams.compute;
      stream_->defer_until_waited();
    }
#endif
  }
  ComputeHold(const ComputeHold&) = delete;
  ComputeHold& operator=(const ComputeHold&) = delete;
  ~ComputeHold() {
#if ZERO_TEST_TWIN
    if (stream_ != nullptr) stream_->end_deferral();
#endif
  }

 private:
#if ZERO_TEST_TWIN
  zero::HostStream* stream_ = nullptr;
#endif
};

} // namespace zero::testing
