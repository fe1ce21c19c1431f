#pragma once
// The examples' cuBLAS calls checked: a failed call throws zero::Error (kind cuda) naming the call
// and cuBLAS's own words for the status. The handle is kept as void* in the examples' headers, so
// that cuBLAS's types stay out of code the host compiler builds without it.

#include <zero/core/error.hpp>

#include <cublas_v2.h>

#include <string>

namespace examples {

inline void check_blas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    zero::fail(zero::ErrorKind::cuda, std::string(call) +
                                          " failed: " + cublasGetStatusName(status) + " (" +
                                          cublasGetStatusString(status) + ")");
}

inline cublasHandle_t blas_handle(void* blas) {
  return static_cast<cublasHandle_t>(blas);
}

} // namespace examples
