#pragma once
// The examples' GPU set-up (train_mlp and train_gpt --device cuda): which GPU a rank uses and
// whether every rank has one of its own (NCCL's condition), the streams of a rank, and the
// device memory in use.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/reduce_op.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>
#include <zero/core/error.hpp>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <array>
#include <cstddef>
#include <span>
#include <string>

namespace examples {

// The device's memory in use: total less free, as cudaMemGetInfo sees it (every process's).
inline std::size_t device_bytes_in_use() {
  std::size_t free = 0, total = 0;
  ZERO_CHECK_CUDA(cudaMemGetInfo(&free, &total));
  return total - free;
}

// The streams of one rank: the trainer's compute stream (the engine's), and the staged
// communicator's caller and transfer streams. Destroyed after everything that queues on them.
struct GpuStreams {
  std::array<cudaStream_t, 3> streams{};
  GpuStreams() {
    try {
      for (cudaStream_t& s : streams)
        ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    } catch (...) {
      destroy(); // the ones created (the destructor does not run)
      throw;
    }
  }
  ~GpuStreams() { destroy(); }
  GpuStreams(const GpuStreams&) = delete;
  GpuStreams& operator=(const GpuStreams&) = delete;
  zero::CudaStreamSpace compute() const { return zero::CudaStreamSpace(streams[0]); }
  zero::CudaStreamSpace caller() const { return zero::CudaStreamSpace(streams[1]); }
  zero::CudaStreamSpace transfer() const { return zero::CudaStreamSpace(streams[2]); }

 private:
  void destroy() noexcept {
    for (cudaStream_t s : streams)
      if (s) ZERO_LOG_CUDA(cudaStreamDestroy(s));
  }
};

// Which GPU this rank uses (its rank among the node's ranks, modulo the node's GPUs; made current
// here) and whether every rank has one of its own, which NCCL needs. Collective: every rank
// learns the same answer.
struct GpuPlace {
  int device = 0;
  bool own_gpu = true; // on every rank
};

inline GpuPlace place_on_gpu(zero::MpiCommunicator& world) {
  int devices = 0;
  const cudaError_t found = cudaGetDeviceCount(&devices);
  zero::require(found == cudaSuccess && devices > 0,
                "--device cuda: rank " + std::to_string(world.rank()) + " finds no CUDA device (" +
                    cudaGetErrorString(found) + ")",
                zero::ErrorKind::unsupported);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_Comm(world.boost_communicator()), MPI_COMM_TYPE_SHARED, world.rank(),
                      MPI_INFO_NULL, &node);
  int local_rank = 0, local_ranks = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  GpuPlace place{local_rank % devices, local_ranks <= devices};
  ZERO_CHECK_CUDA(cudaSetDevice(place.device));
  std::array<int, 1> own{place.own_gpu ? 1 : 0};
  world.all_reduce(std::span<int>(own), zero::ReduceOp::min).wait();
  place.own_gpu = own[0] == 1;
  return place;
}

} // namespace examples
