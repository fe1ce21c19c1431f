#pragma once
// for_each_index(space, n, kernel): kernel(i) for every i in [0, n), run by an execution space.
// This is how a model's element-wise and per-row work is written once for every space: the kernel
// is a copyable object whose call operator is ZERO_HOST_DEVICE and reads and writes through the
// pointers it holds (memory of the space's memory space), as a CUDA kernel's arguments do.
//
//   struct Scale {
//     float* x;
//     float factor;
//     ZERO_HOST_DEVICE void operator()(std::size_t i) const { x[i] *= factor; }
//   };
//   zero::for_each_index(exec, n, Scale{x, 2.0f});
//
// HostThreads runs the calls on the calling thread's OpenMP team (a static schedule) and returns
// when they are done. A stream space based on HostStreamSpace (DeviceTwinSpace among them) queues
// the same loop on its stream. CudaStreamSpace launches a kernel, one call per CUDA thread, from
// zero/core/cuda_for_each.cuh (compiled by nvcc only). The calls for different i must not depend
// on each other: no space promises an order among them. A kernel does not throw (a CUDA kernel
// cannot, and on the host an exception would leave an OpenMP region). Whatever order a kernel's own
// sums take inside one call is the same in every space, which is what makes the spaces' results
// comparable bit for bit.
//
// A kernel that declares `static constexpr bool elementwise = true` (ElementwiseKernel: a few
// operations per index, no loops) asks the host to vectorise across indices as well.

#include "zero/core/execution_space.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/core/parallel.hpp"

#include <concepts>
#include <cstddef>
#include <string>

namespace zero {

template <class K>
concept IndexKernel = std::copy_constructible<K> && std::invocable<const K&, std::size_t>;

template <class K>
concept ElementwiseKernel = IndexKernel<K> && K::elementwise;

namespace detail {
// Indices below which one thread runs the whole loop: a parallel region costs a few
// microseconds, which a handful of calls does not pay for.
inline constexpr std::size_t for_each_serial_below = 2;

// Each thread calls its own copy of the kernel: pointers in a thread's local object cannot be
// changed by the stores through them, so the compiler keeps them in registers and vectorises the
// loop (through the shared object, an element-wise kernel ran 2.5-4 times slower).
template <IndexKernel K>
void run_indices(std::size_t n, const K& kernel) {
  if constexpr (ElementwiseKernel<K>) {
#pragma omp parallel if (n >= parallel_threshold)
    {
      const K local = kernel;
#pragma omp for simd schedule(static)
      for (std::size_t i = 0; i < n; ++i)
        local(i);
    }
  } else {
#pragma omp parallel if (n >= for_each_serial_below)
    {
      const K local = kernel;
#pragma omp for schedule(static)
      for (std::size_t i = 0; i < n; ++i)
        local(i);
    }
  }
}
} // namespace detail

// kernel(i) for i in [0, n) on the calling thread's OpenMP team; returns when all are done.
template <IndexKernel K>
void for_each_index(const HostThreads&, std::size_t n, const K& kernel) {
  detail::run_indices(n, kernel);
}

// Queues the same loop on the space's stream (its worker thread and that thread's OpenMP team).
// The pointers in `kernel` must stay valid until the queued work ran, as with any kernel.
template <IndexKernel K, HostStreamBased S>
void for_each_index(const S& space, std::size_t n, const K& kernel) {
  if (n == 0) return;
  space.stream().enqueue("for_each_index over " + std::to_string(n) + " indices",
                         [n, kernel] { detail::run_indices(n, kernel); });
}

} // namespace zero
