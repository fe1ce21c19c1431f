#pragma once
// Memory spaces tag where bytes live, as Kokkos' spaces do: `host` (pageable), `pinned_host`
// (page-locked when CUDA is available, so that copies to the device are asynchronous; plain
// aligned host memory otherwise) and `cuda` (device memory). Each space allocates and frees its
// own memory; a MemorySpace is any type that does the same.

#include "zero/core/cuda_check.hpp"
#include "zero/core/error.hpp"
#include "zero/core/platform.hpp"

#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>

namespace zero {

// Every allocation is aligned to at least a cache line (and to a full AVX-512 vector).
inline constexpr std::size_t buffer_alignment = 64;

namespace detail {
inline void* aligned_host_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = (bytes + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
  void* p = std::aligned_alloc(buffer_alignment, rounded);
  if (p == nullptr)
    fail(ErrorKind::invalid_argument,
         "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}
} // namespace detail

struct host {
  using memory_space = host;
  static constexpr bool host_accessible = true;
  static constexpr const char* name = "host";
  static void* allocate(std::size_t bytes) { return detail::aligned_host_allocate(bytes); }
  static void deallocate(void* p, std::size_t) noexcept { std::free(p); }
};

struct pinned_host {
  using memory_space = pinned_host;
  static constexpr bool host_accessible = true;
  static constexpr const char* name = "pinned_host";
  static void* allocate(std::size_t bytes) {
#if ZERO_HAS_CUDA
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    ZERO_CHECK_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    return p;
#else
    return detail::aligned_host_allocate(bytes);
#endif
  }
  static void deallocate(void* p, std::size_t) noexcept {
#if ZERO_HAS_CUDA
    if (p != nullptr) ZERO_LOG_CUDA(cudaFreeHost(p));
#else
    std::free(p);
#endif
  }
};

struct cuda {
  using memory_space = cuda;
  static constexpr bool host_accessible = false;
  static constexpr const char* name = "cuda";
  static void* allocate([[maybe_unused]] std::size_t bytes) {
#if ZERO_HAS_CUDA
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    ZERO_CHECK_CUDA(cudaMalloc(&p, bytes));
    return p;
#else
    fail(ErrorKind::unsupported, "zero::cuda memory needs the CUDA backend (link zero::cuda)");
#endif
  }
  static void deallocate([[maybe_unused]] void* p, std::size_t) noexcept {
#if ZERO_HAS_CUDA
    if (p != nullptr) ZERO_LOG_CUDA(cudaFree(p));
#endif
  }
};

// device_twin: host memory typed as a device's (not host-accessible), the CPU twin of `cuda`. Host
// code cannot index it (View and Buffer refuse at compile time), so code that compiles over it
// touches it only through an execution space's kernels and copies, as device memory must be;
// DeviceTwinSpace (zero/core/host_stream_space.hpp), a host stream over it, runs that code in CI.
struct device_twin {
  using memory_space = device_twin;
  static constexpr bool host_accessible = false;
  static constexpr bool host_backed = true; // a host stream's kernels reach it
  static constexpr const char* name = "device_twin";
  static void* allocate(std::size_t bytes) { return detail::aligned_host_allocate(bytes); }
  static void deallocate(void* p, std::size_t) noexcept { std::free(p); }
};

template <class S>
concept MemorySpace = requires(void* p, std::size_t bytes) {
  typename S::memory_space;
  requires std::same_as<typename S::memory_space, S>;
  { S::host_accessible } -> std::convertible_to<bool>;
  { S::allocate(bytes) } -> std::same_as<void*>;
  { S::deallocate(p, bytes) }
  noexcept;
};

template <class S>
concept HostAccessibleSpace = MemorySpace<S> && S::host_accessible;

// Memory in the host's address space: host-accessible, or device_twin, which only the kernels and
// copies of a host stream reach.
template <class S>
concept HostBackedSpace = MemorySpace<S> &&
    (S::host_accessible || requires { requires S::host_backed; });

// The memory space of a buffer-like type: its `memory_space` member, or `host` for standard
// containers and spans.
namespace detail {
template <class R>
struct memory_space_of {
  using type = host;
};
template <class R>
requires requires {
  typename R::memory_space;
}
struct memory_space_of<R> {
  using type = typename R::memory_space;
};
} // namespace detail

template <class R>
using memory_space_of = typename detail::memory_space_of<std::remove_cvref_t<R>>::type;

// Whether code working in `CommSpace` (a communicator's space, say) can use a buffer living in
// `BufferSpace`: host code takes any host-accessible memory, device code its own space only.
template <class CommSpace, class BufferSpace>
inline constexpr bool accepts_space =
    CommSpace::host_accessible ? BufferSpace::host_accessible
                               : std::is_same_v<CommSpace, BufferSpace>;

} // namespace zero
