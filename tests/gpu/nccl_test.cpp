// NcclCommunicator on the GPU: every collective, element type and reduction against the same
// reference values as the host communicators (one rank per GPU; run under mpirun for more).

#include "reference.hpp"

#include <zero/comm/nccl_communicator.hpp>

#include <gtest/gtest.h>

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
}

TEST(Nccl, BadArgumentsThrow) {
  zero::Buffer<float, zero::cuda> a(10), b(11);
  EXPECT_THROW(nccl().all_reduce(a, b, ReduceOp::sum).wait(), zero::Error);
}

} // namespace
