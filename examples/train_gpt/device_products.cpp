// Products<zero::CudaStreamSpace>: the device model's matrix products through cuBLAS on the
// space's stream (device_products.hpp says why fp32 without TF32, why bf16 operands summed in fp32,
// and why a workspace of its own).

#include "device_products.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/device_convert.hpp>
#include <zero/core/error.hpp>

#include "../common/cublas_check.hpp"

#include <cublas_v2.h>

#include <cstddef>
#include <string>

namespace gpt {
namespace {

using examples::blas_handle;
using examples::check_blas;

cublasOperation_t operation(bool transposed) {
  return transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// cuBLAS's own recommendation for Hopper's workspace.
constexpr std::size_t workspace_bytes = std::size_t{32} << 20;

} // namespace

Products<zero::CudaStreamSpace>::Products(const zero::CudaStreamSpace& space,
                                          ProductPrecision precision, OperandSizes largest)
    : precision_(precision), stream_(space.stream()) {
  cublasHandle_t blas = nullptr;
  check_blas(cublasCreate(&blas), "cublasCreate");
  blas_ = blas;
  try {
    check_blas(cublasSetStream(blas, stream_), "cublasSetStream");
    // fp32: no TF32. bf16: the default, whose bf16 products with CUBLAS_COMPUTE_32F run on
    // tensor cores and sum in fp32.
    check_blas(cublasSetMathMode(blas, precision == ProductPrecision::fp32 ? CUBLAS_PEDANTIC_MATH
                                                                           : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
    ZERO_CHECK_CUDA(cudaMalloc(&workspace_, workspace_bytes));
    // After the stream: setting a stream gives the handle back its default workspace.
    check_blas(cublasSetWorkspace(blas, workspace_, workspace_bytes), "cublasSetWorkspace");
    if (precision == ProductPrecision::bf16) {
      capacity_ = largest;
      ZERO_CHECK_CUDA(cudaMalloc(&a_rounded_, largest.a * sizeof(zero::bfloat16)));
      ZERO_CHECK_CUDA(cudaMalloc(&b_rounded_, largest.b * sizeof(zero::bfloat16)));
    }
  } catch (...) {
    for (void* memory : {workspace_, a_rounded_, b_rounded_})
      if (memory != nullptr) ZERO_LOG_CUDA(cudaFree(memory));
    cublasDestroy(blas);
    throw;
  }
}

Products<zero::CudaStreamSpace>::~Products() {
  cublasDestroy(blas_handle(blas_)); // waits for the handle's work before the workspace goes
  // The conversions are the stream's too: let them finish before their memory goes.
  if (precision_ == ProductPrecision::bf16) ZERO_LOG_CUDA(cudaStreamSynchronize(stream_));
  for (void* memory : {workspace_, a_rounded_, b_rounded_})
    if (memory != nullptr) ZERO_LOG_CUDA(cudaFree(memory));
}

const void* Products<zero::CudaStreamSpace>::operand(const float* x, std::size_t span,
                                                     void* rounded, std::size_t capacity) const {
  if (precision_ == ProductPrecision::fp32) return x;
  detail::require_scratch(span, capacity);
  if (span > 0)
    zero::cuda_kernels::convert(x, static_cast<zero::bfloat16*>(rounded), span, stream_);
  return rounded;
}

namespace {
cudaDataType element_type(ProductPrecision p) {
  return p == ProductPrecision::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}
} // namespace

// Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: the operands swap places and
// keep their transposition flags. cublasGemmEx's fp32 case is cublasSgemm's; the math mode set
// above keeps it off TF32.
void Products<zero::CudaStreamSpace>::gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n,
                                           std::size_t k, float alpha, const float* a,
                                           std::size_t lda, const float* b, std::size_t ldb,
                                           float beta, float* c, std::size_t ldc) const {
  const void* a_used = operand(a, operand_span(trans_a, m, k, lda), a_rounded_, capacity_.a);
  const void* b_used = operand(b, operand_span(trans_b, k, n, ldb), b_rounded_, capacity_.b);
  const cudaDataType type = element_type(precision_);
  check_blas(cublasGemmEx(blas_handle(blas_), operation(trans_b), operation(trans_a), int(n),
                          int(m), int(k), &alpha, b_used, type, int(ldb), a_used, type, int(lda),
                          &beta, c, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

void Products<zero::CudaStreamSpace>::gemm_batched(bool trans_a, bool trans_b, std::size_t m,
                                                   std::size_t n, std::size_t k, float alpha,
                                                   const float* a, std::size_t lda, const float* b,
                                                   std::size_t ldb, float beta, float* c,
                                                   std::size_t ldc, const Batch& batch) const {
  const std::size_t element =
      precision_ == ProductPrecision::bf16 ? sizeof(zero::bfloat16) : sizeof(float);
  const auto* a_used = static_cast<const char*>(
      operand(a, operand_span(trans_a, m, k, lda, batch, batch.a_outer, batch.a_inner), a_rounded_,
              capacity_.a));
  const auto* b_used = static_cast<const char*>(
      operand(b, operand_span(trans_b, k, n, ldb, batch, batch.b_outer, batch.b_inner), b_rounded_,
              capacity_.b));
  const cudaDataType type = element_type(precision_);
  for (std::size_t o = 0; o < batch.outer; ++o)
    check_blas(cublasGemmStridedBatchedEx(
                   blas_handle(blas_), operation(trans_b), operation(trans_a), int(n), int(m),
                   int(k), &alpha, b_used + o * batch.b_outer * element, type, int(ldb),
                   static_cast<long long>(batch.b_inner), a_used + o * batch.a_outer * element,
                   type, int(lda), static_cast<long long>(batch.a_inner), &beta,
                   c + o * batch.c_outer, CUDA_R_32F, int(ldc),
                   static_cast<long long>(batch.c_inner), int(batch.inner), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

} // namespace gpt
