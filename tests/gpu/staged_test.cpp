// StagedCommunicator over CudaStreamSpace: device buffers carried through pinned host memory over
// MPI, at any number of ranks sharing one GPU (NCCL refuses that). Inputs are written by async
// copies on the caller's stream and the call follows at once, with no synchronisation between
// them: the communicator's contract is that it waits for that stream (the first test holds the
// stream so that the copy is certainly pending at the call). Run under mpirun with 2 or 3
// ranks for the shared-GPU case (tools/zero-gpu-check does); one rank runs as an MPI singleton.

#include "staged_setup.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using namespace zero::testing;

// Keeps a stream from running past it until opened: a host function that blocks the stream (it
// makes no CUDA call, as host functions must not), so that the caller's copy is certainly still
// pending when the collective is called, whatever the timing.
struct StreamLatch {
  std::atomic<bool> open{false};
  static void CUDART_CB block(void* self) {
    while (!static_cast<StreamLatch*>(self)->open.load())
      std::this_thread::yield();
  }
};

TEST(StagedCuda, AllReduceWaitsForTheCallersCopy) {
  StagedSetup s;
  constexpr std::size_t n = 1 << 22;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>((i % 97) + std::size_t(s.rank));
  zero::Buffer<float, zero::cuda> device(n, zero::uninitialized);
  zero::Buffer<float, zero::pinned_host> pinned(n, zero::uninitialized);
  // A first call of the same size grows the staging memory, so that nothing but the wait for the
  // caller's stream can delay the second one.
  s.comm.all_reduce(device, zero::ReduceOp::sum).wait();
  StreamLatch latch;
  ZERO_CHECK_CUDA(cudaLaunchHostFunc(s.streams.caller, StreamLatch::block, &latch));
  s.write_async(host, device, pinned);
  zero::Work work = s.comm.all_reduce(device, zero::ReduceOp::sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(work.test()) << "the collective finished while the caller's stream was held";
  latch.open = true;
  work.wait();
  const std::vector<float> out = s.read(device);
  const float rank_sum = static_cast<float>(s.ranks * (s.ranks - 1) / 2);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(out[i], static_cast<float>(i % 97) * static_cast<float>(s.ranks) + rank_sum)
        << "element " << i;
}

TEST(StagedCuda, GatherAndBroadcastInCallOrder) {
  StagedSetup s;
  constexpr std::size_t n = 100003;
  std::vector<double> mine(n, static_cast<double>(s.rank + 1));
  zero::Buffer<double, zero::cuda> block(n, zero::uninitialized);
  zero::Buffer<double, zero::pinned_host> pinned(n, zero::uninitialized);
  s.write_async(mine, block, pinned);
  zero::Buffer<double, zero::cuda> all(n * static_cast<std::size_t>(s.ranks), zero::uninitialized);
  // The broadcast reads the gather's output with no wait between them.
  zero::Work gathered = s.comm.all_gather(block, all);
  zero::Work broadcast = s.comm.broadcast(all, s.ranks - 1);
  broadcast.wait();
  gathered.wait();
  const std::vector<double> out = s.read(all);
  for (int r = 0; r < s.ranks; ++r)
    ASSERT_EQ(out[std::size_t(r) * n + n - 1], static_cast<double>(r + 1)) << "block " << r;
}

TEST(StagedCuda, HalfReducesLikeTheHost) {
  StagedSetup s;
  constexpr std::size_t n = 4099;
  std::vector<zero::half> host(n, zero::half(0.5f));
  zero::Buffer<zero::half, zero::cuda> device(n, zero::uninitialized);
  zero::Buffer<zero::half, zero::pinned_host> pinned(n, zero::uninitialized);
  s.write_async(host, device, pinned);
  s.comm.all_reduce(device, zero::ReduceOp::avg).wait();
  const std::vector<zero::half> out = s.read(device);
  EXPECT_EQ(out[n - 1].bits, zero::half(0.5f).bits);
}

} // namespace
