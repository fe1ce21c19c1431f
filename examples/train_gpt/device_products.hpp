#pragma once
// The device model's matrix products (device_model.hpp), queued on an execution space's stream,
// row-major as kernels::gemm: c = alpha op(a) op(b) + beta c.
//
// - Products<S> for a host stream space (the twin): the host model's own calls, run by the
//   stream's worker, so that the twin computes the host model's bits: kernels::gemm for a single
//   product, and for a batch one OpenBLAS call per product (the host attention's calls).
// - Products<zero::CudaStreamSpace>: cuBLAS on the space's stream (device_products.cpp). fp32
//   throughout, without TF32 (CUBLAS_PEDANTIC_MATH), on a workspace of the handle's own, so that
//   a product's bits do not change from run to run: cuBLAS documents bitwise reproducible results
//   on GPUs of the same architecture and SM count for a given toolkit, where other concurrent
//   streams do not share the handle's workspace (a handle per stream, or cublasSetWorkspace).

#include "gpt_kernels.hpp"

#include <zero/core/host_stream_space.hpp>

#if ZERO_HAS_CUDA
#include <zero/core/cuda_stream_space.hpp>
#endif

#include <cblas.h>

#include <cstddef>

namespace gpt {

// Products in two levels (a sequence, then its heads): product (o, i) reads a at
// a + o * a_outer + i * a_inner, b likewise, and writes c at c + o * c_outer + i * c_inner.
struct Batch {
  std::size_t outer, inner;
  std::size_t a_outer, a_inner, b_outer, b_inner, c_outer, c_inner;
};

template <class Exec>
class Products;

template <zero::HostStreamBased S>
class Products<S> {
 public:
  explicit Products(const S& space) : space_(space) {}

  void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
            const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
            std::size_t ldc) const {
    space_.stream().enqueue("gemm", [=] {
      kernels::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  }

  void gemm_batched(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                    float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                    float beta, float* c, std::size_t ldc, const Batch& batch) const {
    space_.stream().enqueue("gemm_batched", [=] {
#pragma omp parallel for schedule(static)
      for (std::size_t p = 0; p < batch.outer * batch.inner; ++p) {
        const std::size_t o = p / batch.inner, i = p % batch.inner;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
                    a + o * batch.a_outer + i * batch.a_inner, int(lda),
                    b + o * batch.b_outer + i * batch.b_inner, int(ldb), beta,
                    c + o * batch.c_outer + i * batch.c_inner, int(ldc));
      }
    });
  }

 private:
  S space_;
};

#if ZERO_HAS_CUDA
template <>
class Products<zero::CudaStreamSpace> {
 public:
  explicit Products(const zero::CudaStreamSpace& space);
  ~Products();
  Products(const Products&) = delete;
  Products& operator=(const Products&) = delete;

  void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
            const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
            std::size_t ldc) const;
  void gemm_batched(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                    float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                    float beta, float* c, std::size_t ldc, const Batch& batch) const;

 private:
  void* blas_ = nullptr;      // cublasHandle_t (cuBLAS stays out of this header)
  void* workspace_ = nullptr; // device memory of its own
};
#endif

} // namespace gpt
