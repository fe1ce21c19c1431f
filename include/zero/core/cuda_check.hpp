#pragma once
// Check macros for CUDA runtime calls: ZERO_CHECK_CUDA throws zero::Error, ZERO_ASSERT_CUDA aborts
// (programming errors), ZERO_LOG_CUDA only reports (destructors, noexcept paths). Available when
// zero::cuda is linked (ZERO_HAS_CUDA).

#include "zero/core/error.hpp"
#include "zero/core/platform.hpp"

#if ZERO_HAS_CUDA
#include <cuda_runtime_api.h>

#include <string>

namespace zero::detail {
inline std::string cuda_message(cudaError_t status, const char* call, const char* file, int line) {
  return std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
         cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line);
}
} // namespace zero::detail

#define ZERO_CHECK_CUDA(call)                                                                      \
  do {                                                                                             \
    const cudaError_t zero_status_ = (call);                                                       \
    if (zero_status_ != cudaSuccess)                                                               \
      ::zero::fail(::zero::ErrorKind::cuda,                                                        \
                   ::zero::detail::cuda_message(zero_status_, #call, __FILE__, __LINE__));         \
  } while (false)

#define ZERO_ASSERT_CUDA(call)                                                                     \
  do {                                                                                             \
    const cudaError_t zero_status_ = (call);                                                       \
    if (zero_status_ != cudaSuccess) {                                                             \
      ::zero::detail::log_error(                                                                   \
          ::zero::detail::cuda_message(zero_status_, #call, __FILE__, __LINE__));                  \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)

#define ZERO_LOG_CUDA(call)                                                                        \
  do {                                                                                             \
    const cudaError_t zero_status_ = (call);                                                       \
    if (zero_status_ != cudaSuccess)                                                               \
      ::zero::detail::log_error(                                                                   \
          ::zero::detail::cuda_message(zero_status_, #call, __FILE__, __LINE__));                  \
  } while (false)
#endif
