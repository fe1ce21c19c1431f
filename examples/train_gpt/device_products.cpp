// Products<zero::CudaStreamSpace>: the device model's matrix products through cuBLAS on the
// space's stream (device_products.hpp says why fp32 without TF32 and a workspace of its own).

#include "device_products.hpp"

#include <zero/core/cuda_check.hpp>
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

Products<zero::CudaStreamSpace>::Products(const zero::CudaStreamSpace& space) {
  cublasHandle_t blas = nullptr;
  check_blas(cublasCreate(&blas), "cublasCreate");
  blas_ = blas;
  try {
    check_blas(cublasSetStream(blas, space.stream()), "cublasSetStream");
    check_blas(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    ZERO_CHECK_CUDA(cudaMalloc(&workspace_, workspace_bytes));
    // After the stream: setting a stream gives the handle back its default workspace.
    check_blas(cublasSetWorkspace(blas, workspace_, workspace_bytes), "cublasSetWorkspace");
  } catch (...) {
    if (workspace_ != nullptr) ZERO_LOG_CUDA(cudaFree(workspace_));
    cublasDestroy(blas);
    throw;
  }
}

Products<zero::CudaStreamSpace>::~Products() {
  cublasDestroy(blas_handle(blas_)); // waits for the handle's work before the workspace goes
  ZERO_LOG_CUDA(cudaFree(workspace_));
}

// Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: the operands swap places and
// keep their transposition flags.
void Products<zero::CudaStreamSpace>::gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n,
                                           std::size_t k, float alpha, const float* a,
                                           std::size_t lda, const float* b, std::size_t ldb,
                                           float beta, float* c, std::size_t ldc) const {
  check_blas(cublasSgemm(blas_handle(blas_), operation(trans_b), operation(trans_a), int(n), int(m),
                         int(k), &alpha, b, int(ldb), a, int(lda), &beta, c, int(ldc)),
             "cublasSgemm");
}

void Products<zero::CudaStreamSpace>::gemm_batched(bool trans_a, bool trans_b, std::size_t m,
                                                   std::size_t n, std::size_t k, float alpha,
                                                   const float* a, std::size_t lda, const float* b,
                                                   std::size_t ldb, float beta, float* c,
                                                   std::size_t ldc, const Batch& batch) const {
  for (std::size_t o = 0; o < batch.outer; ++o)
    check_blas(cublasSgemmStridedBatched(
                   blas_handle(blas_), operation(trans_b), operation(trans_a), int(n), int(m),
                   int(k), &alpha, b + o * batch.b_outer, int(ldb),
                   static_cast<long long>(batch.b_inner), a + o * batch.a_outer, int(lda),
                   static_cast<long long>(batch.a_inner), &beta, c + o * batch.c_outer, int(ldc),
                   static_cast<long long>(batch.c_inner), int(batch.inner)),
               "cublasSgemmStridedBatched");
}

} // namespace gpt
