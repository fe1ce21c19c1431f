#pragma once
// The backends the collective benchmark can time: zero's MpiCommunicator ("mpi"), plain Open MPI
// calls ("raw-mpi", the baseline) and, with CUDA, zero's NcclCommunicator ("nccl"). Each runs a
// described collective some number of times and owns its buffers (host or device).

#include <zero/comm/collective.hpp>
#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/transport/native_collectives.hpp>
#include <zero/core/buffer.hpp>
#if ZERO_HAS_CUDA
#include <zero/comm/nccl_communicator.hpp>
#endif

#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace bench {

using zero::Collective;
using zero::CollectiveArgs;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  // Runs `a` `iterations` times and returns once all completed.
  virtual void run(const CollectiveArgs& a, int iterations) = 0;
  // Buffers the benchmark fills and checks, in the backend's memory.
  virtual std::byte* send_buffer() = 0;
  virtual std::byte* recv_buffer() = 0;
  virtual void upload(std::byte* target, const std::byte* host, std::size_t bytes) {
    std::memcpy(target, host, bytes);
  }
  virtual void download(std::byte* host, const std::byte* source, std::size_t bytes) {
    std::memcpy(host, source, bytes);
  }
};

class HostBuffers : public Backend {
 public:
  explicit HostBuffers(std::size_t bytes) : send_(bytes), recv_(bytes) {}
  std::byte* send_buffer() override { return send_.data(); }
  std::byte* recv_buffer() override { return recv_.data(); }

 private:
  zero::Buffer<std::byte> send_, recv_;
};

// zero's MpiCommunicator: nccl-tests' way, all iterations in flight, then one wait (or, with
// `blocking`, a wait after each call).
class ZeroMpiBackend final : public HostBuffers {
 public:
  ZeroMpiBackend(zero::MpiCommunicator& comm, std::size_t bytes, bool blocking)
      : HostBuffers(bytes), comm_(comm), blocking_(blocking) {}
  std::string describe() const override {
    return std::string("zero MpiCommunicator, ") + comm_.transport() + " transport, " +
           std::to_string(comm_.nodes()) + " node(s), " +
           std::to_string(comm_.options().chunk_bytes >> 10) + " KiB chunks, " +
           (blocking_ ? "wait after each call" : "all iterations in flight");
  }
  void run(const CollectiveArgs& a, int iterations) override {
    std::vector<zero::Work> works;
    for (int i = 0; i < iterations; ++i) {
      works.push_back(comm_.submit(a));
      if (blocking_) works.back().wait();
    }
    zero::wait_all(works);
  }

 private:
  zero::MpiCommunicator& comm_;
  bool blocking_;
};

// Plain blocking Open MPI calls with its default algorithms: the baseline.
class RawMpiBackend final : public HostBuffers {
 public:
  RawMpiBackend(MPI_Comm comm, std::size_t bytes) : HostBuffers(bytes), comm_(comm) {}
  std::string describe() const override { return "plain Open MPI calls (default algorithms)"; }

  static void require_supported(const CollectiveArgs& a) {
    if (!zero::uses_reduce_op(a.kind)) return;
    zero::require(a.op != zero::ReduceOp::avg,
                  "raw-mpi: MPI has no average; use --redop sum, max or min");
    zero::require(!zero::is_low_precision(a.dtype),
                  "raw-mpi: MPI has no half or bfloat16 reductions; use --dtype float");
  }

  void run(const CollectiveArgs& a, int iterations) override {
    for (int i = 0; i < iterations; ++i)
      zero::detail::run_native(comm_, a);
  }

 private:
  MPI_Comm comm_;
};

#if ZERO_HAS_CUDA
class NcclBackend final : public Backend {
 public:
  NcclBackend(zero::MpiCommunicator& bootstrap, std::size_t bytes)
      : comm_(bootstrap), send_(bytes), recv_(bytes) {}
  std::string describe() const override { return "zero NcclCommunicator"; }
  void run(const CollectiveArgs& a, int iterations) override {
    std::vector<zero::Work> works;
    for (int i = 0; i < iterations; ++i)
      works.push_back(comm_.submit(a));
    zero::wait_all(works);
  }
  std::byte* send_buffer() override { return send_.data(); }
  std::byte* recv_buffer() override { return recv_.data(); }
  void upload(std::byte* target, const std::byte* host, std::size_t bytes) override {
    ZERO_CHECK_CUDA(cudaMemcpy(target, host, bytes, cudaMemcpyHostToDevice));
  }
  void download(std::byte* host, const std::byte* source, std::size_t bytes) override {
    ZERO_CHECK_CUDA(cudaMemcpy(host, source, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  zero::NcclCommunicator comm_;
  zero::Buffer<std::byte, zero::cuda> send_, recv_;
};
#endif

} // namespace bench
