#pragma once
// What the compiler and build give us: host/device annotations and the optional backends.

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ZERO_HOST_DEVICE __host__ __device__
#else
#define ZERO_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define ZERO_DEVICE_CODE 1
#else
#define ZERO_DEVICE_CODE 0
#endif

// ZERO_HAS_CUDA and ZERO_HAS_MPI are set by the zero::cuda and zero::mpi link targets.
#ifndef ZERO_HAS_CUDA
#define ZERO_HAS_CUDA 0
#endif
#ifndef ZERO_HAS_MPI
#define ZERO_HAS_MPI 0
#endif

namespace zero {
// For static_assert in a primary template: false, but only once the template is instantiated.
template <class...>
inline constexpr bool dependent_false = false;
} // namespace zero
