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
struct CudaStatus {
  static bool ok(cudaError_t status) noexcept { return status == cudaSuccess; }
  static std::string message(cudaError_t status, const char* call, const char* file, int line) {
    return cuda_message(status, call, file, line);
  }
};
} // namespace zero::detail

#define ZERO_CHECK_CUDA(call) ZERO_CHECK_STATUS(::zero::detail::CudaStatus, cuda, call)
#define ZERO_ASSERT_CUDA(call) ZERO_ASSERT_STATUS(::zero::detail::CudaStatus, call)
#define ZERO_LOG_CUDA(call) ZERO_LOG_STATUS(::zero::detail::CudaStatus, call)
#endif
