// NcclCommunicator on the GPU: every collective, element type and reduction against the same
// reference values as the host communicators (one rank per GPU; run under mpirun for more), with
// inputs written the way a caller writes them and no device-wide synchronisation: the ordering
// contract (nccl_communicator.hpp) is what makes them visible to the collective, and what makes its
// results visible to the caller's stream.

#include "reference.hpp"

#include <zero/comm/nccl_communicator.hpp>
#include <zero/tensor_parallel/conjugates.hpp>
#include <zero/tensor_parallel/groups.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

namespace {

using zero::Collective;
using zero::DType;
using zero::ReduceOp;

zero::MpiCommunicator& bootstrap() {
  static zero::MpiCommunicator world;
  return world;
}
zero::NcclCommunicator& nccl() {
  static zero::NcclCommunicator comm(bootstrap());
  return comm;
}

// Runs one collective on device copies of the reference inputs and counts wrong elements.
long long run_and_count_wrong(Collective kind, DType dtype, ReduceOp op, std::size_t count,
                              bool in_place) {
  auto& comm = nccl();
  const int rank = comm.rank(), ranks = comm.size();
  zero::CollectiveArgs a;
  a.kind = kind;
  a.dtype = dtype;
  a.op = op;
  a.count = count;
  const std::size_t bytes = a.element_bytes();
  const std::size_t send_n = a.send_count(ranks), recv_n = a.recv_count(ranks);
  zero::Buffer<std::byte, zero::cuda> send(std::max(send_n, recv_n) * bytes + 64);
  zero::Buffer<std::byte, zero::cuda> recv(std::max(send_n, recv_n) * bytes + 64);
  a.send = send.data();
  a.recv = recv.data();
  if (in_place) {
    if (kind == Collective::reduce_scatter)
      a.recv = send.data() + std::size_t(rank) * count * bytes;
    else if (kind == Collective::all_gather)
      a.send = recv.data() + std::size_t(rank) * count * bytes;
    else
      a.send = a.recv;
  }
  std::vector<std::byte> host(send_n * bytes);
  const std::size_t first = kind == Collective::all_gather ? std::size_t(rank) * count : 0;
  bench::fill_pattern(dtype, host.data(), send_n, rank, first);
  // A pageable copy on the default stream may still be in flight when it returns (and so may the
  // buffers' cudaMemset): the collective is ordered after the default stream, no sync needed.
  ZERO_CHECK_CUDA(
      cudaMemcpy(const_cast<void*>(a.send), host.data(), host.size(), cudaMemcpyHostToDevice));
  comm.submit(a).wait();
  std::vector<std::byte> out(recv_n * bytes);
  ZERO_CHECK_CUDA(cudaMemcpy(out.data(), a.recv, out.size(), cudaMemcpyDeviceToHost));
  return bench::count_mismatches(a, out.data(), rank, ranks);
}

TEST(Nccl, EveryCollectiveTypeAndReduction) {
  for (DType dtype : {DType::float32, DType::float64, DType::int32, DType::int64, DType::uint8,
                      DType::float16, DType::bfloat16})
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{100003}})
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
          EXPECT_EQ(run_and_count_wrong(Collective::all_reduce, dtype, op, count, in_place), 0)
              << zero::to_string(dtype) << " " << zero::to_string(op) << " " << count;
          EXPECT_EQ(run_and_count_wrong(Collective::reduce_scatter, dtype, op, count, in_place), 0)
              << zero::to_string(dtype) << " " << zero::to_string(op) << " " << count;
        }
        EXPECT_EQ(
            run_and_count_wrong(Collective::all_gather, dtype, ReduceOp::sum, count, in_place), 0);
        EXPECT_EQ(run_and_count_wrong(Collective::broadcast, dtype, ReduceOp::sum, count, in_place),
                  0);
      }
}

// A stream of the caller's, made with cudaStreamNonBlocking so that nothing orders it implicitly.
struct UserStream {
  cudaStream_t s = nullptr;
  UserStream() { ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~UserStream() { ZERO_LOG_CUDA(cudaStreamDestroy(s)); }
  UserStream(const UserStream&) = delete;
  UserStream& operator=(const UserStream&) = delete;
};

// Names `caller` as the communicator's caller stream and restores the previous one when it goes
// out of scope, on a throw too: the static communicator must not keep a destroyed stream as its
// caller. Declared after the stream it names, so that it is restored before that stream dies.
struct CallerStreamGuard {
  zero::NcclCommunicator& comm;
  cudaStream_t previous;
  CallerStreamGuard(zero::NcclCommunicator& c, cudaStream_t caller)
      : comm(c), previous(c.caller_stream()) {
    comm.set_caller_stream(caller);
  }
  ~CallerStreamGuard() { comm.set_caller_stream(previous); }
  CallerStreamGuard(const CallerStreamGuard&) = delete;
  CallerStreamGuard& operator=(const CallerStreamGuard&) = delete;
};

// Inputs written on the caller's stream by an asynchronous copy and a kernel, the collective
// ordered after that stream (set_caller_stream), and the results copied back on the same stream
// after make_stream_wait: no Work::wait(), no cudaDeviceSynchronize. Large enough (64 MiB) that
// a missing order shows as wrong elements.
TEST(Nccl, CallerStreamOrdersBothWays) {
  auto& comm = nccl();
  const int rank = comm.rank(), ranks = comm.size();
  UserStream user;
  const CallerStreamGuard caller(comm, user.s);
  EXPECT_EQ(comm.caller_stream(), user.s);
  constexpr std::size_t n = std::size_t{1} << 24;
  zero::Buffer<float, zero::pinned_host> host(n, zero::uninitialized);
  for (std::size_t i = 0; i < n; ++i)
    host.data()[i] = static_cast<float>(i % 1000 + std::size_t(rank));
  // Device buffers without the zero fill: a cudaMemset on the default stream would not be ordered
  // before the collective any more, now that the caller stream is `user`.
  zero::Buffer<float, zero::cuda> send(n, zero::uninitialized), recv(n, zero::uninitialized);
  ZERO_CHECK_CUDA(
      cudaMemcpyAsync(send.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, user.s));
  zero::cuda_kernels::scale(send.data(), n, 2.0f, user.s); // a kernel writes the input last
  auto work = comm.all_reduce(send, recv, ReduceOp::sum);
  comm.make_stream_wait(user.s);
  ZERO_CHECK_CUDA(
      cudaMemcpyAsync(host.data(), recv.data(), n * sizeof(float), cudaMemcpyDeviceToHost, user.s));
  ZERO_CHECK_CUDA(cudaStreamSynchronize(user.s));
  EXPECT_TRUE(work.test()); // the user stream waited for it
  long long wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double want = 2.0 * (double(i % 1000) * ranks + double(ranks) * (ranks - 1) / 2);
    if (host.data()[i] != static_cast<float>(want)) ++wrong;
  }
  EXPECT_EQ(wrong, 0);

  // Half through the float path (widen, average, round), the input written by a conversion kernel.
  zero::Buffer<zero::half, zero::cuda> send_half(n, zero::uninitialized);
  zero::Buffer<zero::half, zero::cuda> recv_half(n, zero::uninitialized);
  zero::Buffer<zero::half, zero::pinned_host> host_half(n, zero::uninitialized);
  for (std::size_t i = 0; i < n; ++i)
    host.data()[i] = static_cast<float>(i % 64 + std::size_t(rank));
  ZERO_CHECK_CUDA(
      cudaMemcpyAsync(send.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, user.s));
  zero::cuda_kernels::convert(send.data(), send_half.data(), n, user.s);
  auto avg = comm.all_reduce(send_half, recv_half, ReduceOp::avg);
  comm.make_stream_wait(user.s);
  ZERO_CHECK_CUDA(cudaMemcpyAsync(host_half.data(), recv_half.data(), n * sizeof(zero::half),
                                  cudaMemcpyDeviceToHost, user.s));
  ZERO_CHECK_CUDA(cudaStreamSynchronize(user.s));
  EXPECT_TRUE(avg.test());
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(i % 64) + static_cast<float>(ranks - 1) / 2;
    if (host_half.data()[i].bits != zero::half(want).bits) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  work.wait();
  avg.wait();
}

// Floating averages are the host's sum / ranks, bit for bit where the sum is (here exact): at one
// rank, every element of a count that is not a multiple of NCCL's 16-byte packs (NCCL before 2.29.7
// leaves the last ones of a one-rank ncclAvg unwritten, 3 of 100003 floats).
TEST(Nccl, AverageWritesEveryElement) {
  auto& comm = nccl();
  const int ranks = comm.size();
  for (std::size_t n : {std::size_t{100003}, std::size_t{1000001}}) {
    std::vector<float> in(n), out(n, -1.0f);
    for (std::size_t i = 0; i < n; ++i)
      in[i] = static_cast<float>(i % 7) + 0.25f;
    zero::Buffer<float, zero::cuda> send(n), recv(n);
    ZERO_CHECK_CUDA(cudaMemcpy(send.data(), in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    ZERO_CHECK_CUDA(cudaMemset(recv.data(), 0xff, n * sizeof(float))); // NaN where not written
    comm.all_reduce(send, recv, ReduceOp::avg).wait();
    ZERO_CHECK_CUDA(cudaMemcpy(out.data(), recv.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
    long long wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float sum = in[i] * static_cast<float>(ranks); // exact: small multiples of 1/4
      if (std::bit_cast<std::uint32_t>(out[i]) !=
          std::bit_cast<std::uint32_t>(sum / static_cast<float>(ranks)))
        ++wrong;
    }
    EXPECT_EQ(wrong, 0) << n;
  }
}

TEST(Nccl, TypedApiOnDeviceBuffers) {
  auto& comm = nccl();
  zero::Buffer<float, zero::cuda> grads(1000);
  std::vector<float> ones(1000, 1.0f);
  ZERO_CHECK_CUDA(cudaMemcpy(grads.data(), ones.data(), 4000, cudaMemcpyHostToDevice));
  comm.all_reduce(grads, ReduceOp::sum).wait();
  ZERO_CHECK_CUDA(cudaMemcpy(ones.data(), grads.data(), 4000, cudaMemcpyDeviceToHost));
  EXPECT_EQ(ones[999], static_cast<float>(comm.size()));
  comm.barrier();
  auto part = comm.split(0, comm.rank());
  EXPECT_EQ(part.size(), comm.size());
  EXPECT_EQ(part.caller_stream(), comm.caller_stream());
}

// Tensor-parallel groups of NCCL communicators (ncclCommSplit), the size agreed over the host
// bootstrap: one group of all ranks here (one GPU per rank), and a sum over it on the device.
TEST(Nccl, TensorParallelGroupsSplitAndSumOnTheDevice) {
  auto& comm = nccl();
  zero::TensorParallelGroups<zero::NcclCommunicator> groups(comm, comm.size(), bootstrap());
  EXPECT_EQ(groups.tensor_rank(), comm.rank());
  EXPECT_EQ(groups.data_size(), 1);
  zero::Buffer<float, zero::cuda> value(1);
  const float mine = float(comm.rank() + 1);
  ZERO_CHECK_CUDA(cudaMemcpy(value.data(), &mine, sizeof mine, cudaMemcpyHostToDevice));
  zero::sum_over_tensor_group(groups.tensor(), value.view());
  float sum = 0;
  ZERO_CHECK_CUDA(cudaMemcpy(&sum, value.data(), sizeof sum, cudaMemcpyDeviceToHost));
  EXPECT_EQ(sum, float(comm.size() * (comm.size() + 1) / 2));
}

TEST(Nccl, BadArgumentsThrow) {
  zero::Buffer<float, zero::cuda> a(10), b(11);
  EXPECT_THROW(nccl().all_reduce(a, b, ReduceOp::sum).wait(), zero::Error);
}

} // namespace
