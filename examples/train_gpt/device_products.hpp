#pragma once
// The device model's matrix products (device_model.hpp), queued on an execution space's stream,
// row-major as kernels::gemm: c = alpha op(a) op(b) + beta c, all three fp32 in memory. Two
// precisions (ProductPrecision):
//
// - fp32: the products of the operands as they are.
// - bf16: the products of a and b rounded to bf16 (to nearest even, as zero::bfloat16 rounds),
//   summed in fp32: tensor cores' arithmetic. The operands are rounded as PyTorch's bf16 autocast
//   rounds them, but c stays fp32 (autocast's products return bf16). The product of two bf16
//   values is exact in fp32, so the result differs from an fp32 product of the rounded operands
//   in the order of the sum (and in how tensor cores round their fp32 additions). The operands
//   are rounded into scratch of the Products' own, as large as the largest a and b it was built
//   for (OperandSizes: elements from the first to one past the last an operand reaches, batches
//   included).
//
// - Products<S> for a host stream space (the twin): the host model's own calls, run by the
//   stream's worker, so that the twin computes the host model's bits: kernels::gemm for a single
//   product, and for a batch one OpenBLAS call per product (the host attention's calls). bf16
//   rounds the operands to floats holding bf16 values and makes the same calls, so it emulates
//   the GPU's bf16 products up to the order and rounding of their sums.
// - Products<zero::CudaStreamSpace>: cuBLAS on the space's stream (device_products.cpp), on a
//   workspace of the handle's own, so that a product's bits do not change from run to run: cuBLAS
//   documents bitwise reproducible results on GPUs of the same architecture and SM count for a
//   given toolkit, where other concurrent streams do not share the handle's workspace (a handle
//   per stream, or cublasSetWorkspace). fp32 without TF32 (CUBLAS_PEDANTIC_MATH: the exactness
//   checks against PyTorch need it); bf16 through cublasGemmEx on bf16 copies of the operands
//   (zero's convert kernel) with CUBLAS_COMPUTE_32F and fp32 c, on tensor cores.

#include "gpt_kernels.hpp"
#include "product_precision.hpp"

#include <zero/core/host_stream_space.hpp>

#if ZERO_HAS_CUDA
#include <zero/core/cuda_stream_space.hpp>
#endif

#include <zero/core/bfloat16.hpp>
#include <zero/core/error.hpp>

#include <cblas.h>

#include <cstddef>
#include <string>
#include <vector>

namespace gpt {

// Products in two levels (a sequence, then its heads): product (o, i) reads a at
// a + o * a_outer + i * a_inner, b likewise, and writes c at c + o * c_outer + i * c_inner.
struct Batch {
  std::size_t outer, inner;
  std::size_t a_outer, a_inner, b_outer, b_inner, c_outer, c_inner;
};

// The elements from an operand's first to one past the last it reaches: op(x) is rows x cols,
// stored row-major with leading dimension ld (cols x rows when transposed); none when empty.
constexpr std::size_t operand_span(bool transposed, std::size_t rows, std::size_t cols,
                                   std::size_t ld) noexcept {
  if (rows == 0 || cols == 0) return 0;
  return transposed ? (cols - 1) * ld + rows : (rows - 1) * ld + cols;
}

// The same over a batch, whose last product starts at (outer - 1) * outer_stride +
// (inner - 1) * inner_stride.
constexpr std::size_t operand_span(bool transposed, std::size_t rows, std::size_t cols,
                                   std::size_t ld, const Batch& batch, std::size_t outer_stride,
                                   std::size_t inner_stride) noexcept {
  const std::size_t one = operand_span(transposed, rows, cols, ld);
  if (one == 0 || batch.outer == 0 || batch.inner == 0) return 0;
  return (batch.outer - 1) * outer_stride + (batch.inner - 1) * inner_stride + one;
}

// The most elements the products' first and second operands span (their bf16 scratch).
struct OperandSizes {
  std::size_t a = 0, b = 0;
};

namespace detail {
inline void require_scratch(std::size_t span, std::size_t capacity) {
  if (span > capacity)
    zero::fail(zero::ErrorKind::invalid_argument,
               "bf16 products: an operand of " + std::to_string(span) +
                   " elements, more than the " + std::to_string(capacity) +
                   " the products were built for");
}
} // namespace detail

template <class Exec>
class Products;

template <zero::HostStreamBased S>
class Products<S> {
 public:
  Products(const S& space, ProductPrecision precision, OperandSizes largest)
      : space_(space), precision_(precision) {
    if (precision == ProductPrecision::bf16)
      a_rounded_.resize(largest.a), b_rounded_.resize(largest.b);
  }
  Products(const Products&) = delete; // queued work refers to its scratch
  Products& operator=(const Products&) = delete;
  ~Products() {
    if (precision_ == ProductPrecision::fp32) return;
    try {
      space_.fence(); // queued roundings write the scratch
    } catch (...) {   // NOLINT(bugprone-empty-catch): the stream reports its failure to its owner
    }
  }

  void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
            const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
            std::size_t ldc) const {
    const std::size_t a_span = operand_span(trans_a, m, k, lda);
    const std::size_t b_span = operand_span(trans_b, k, n, ldb);
    require_room(a_span, b_span);
    space_.stream().enqueue("gemm", [=, this] {
      kernels::gemm(trans_a, trans_b, m, n, k, alpha, operand(a, a_span, a_rounded_), lda,
                    operand(b, b_span, b_rounded_), ldb, beta, c, ldc);
    });
  }

  void gemm_batched(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                    float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                    float beta, float* c, std::size_t ldc, const Batch& batch) const {
    const std::size_t a_span =
        operand_span(trans_a, m, k, lda, batch, batch.a_outer, batch.a_inner);
    const std::size_t b_span =
        operand_span(trans_b, k, n, ldb, batch, batch.b_outer, batch.b_inner);
    require_room(a_span, b_span);
    space_.stream().enqueue("gemm_batched", [=, this] {
      const float* a_used = operand(a, a_span, a_rounded_);
      const float* b_used = operand(b, b_span, b_rounded_);
#pragma omp parallel for schedule(static)
      for (std::size_t p = 0; p < batch.outer * batch.inner; ++p) {
        const std::size_t o = p / batch.inner, i = p % batch.inner;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
                    a_used + o * batch.a_outer + i * batch.a_inner, int(lda),
                    b_used + o * batch.b_outer + i * batch.b_inner, int(ldb), beta,
                    c + o * batch.c_outer + i * batch.c_inner, int(ldc));
      }
    });
  }

 private:
  void require_room(std::size_t a_span, std::size_t b_span) const {
    if (precision_ == ProductPrecision::fp32) return;
    detail::require_scratch(a_span, a_rounded_.size());
    detail::require_scratch(b_span, b_rounded_.size());
  }

  // On the stream's worker: the operand itself in fp32, else its span rounded to bf16 values
  // into `scratch`.
  const float* operand(const float* x, std::size_t span, std::vector<float>& scratch) const {
    if (precision_ == ProductPrecision::fp32) return x;
    float* rounded = scratch.data();
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < span; ++i)
      rounded[i] = float(zero::bfloat16(x[i]));
    return rounded;
  }

  S space_;
  ProductPrecision precision_;
  // Written by queued work only (hence mutable behind const calls, as a stream's buffers are).
  mutable std::vector<float> a_rounded_, b_rounded_;
};

#if ZERO_HAS_CUDA
template <>
class Products<zero::CudaStreamSpace> {
 public:
  Products(const zero::CudaStreamSpace& space, ProductPrecision precision, OperandSizes largest);
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
  // The operands as cuBLAS reads them: themselves in fp32, else their bf16 copies, converted on
  // the stream into a_rounded_ and b_rounded_.
  const void* operand(const float* x, std::size_t span, void* rounded, std::size_t capacity) const;

  void* blas_ = nullptr;      // cublasHandle_t (cuBLAS stays out of this header)
  void* workspace_ = nullptr; // device memory of its own
  ProductPrecision precision_;
  cudaStream_t stream_;
  OperandSizes capacity_;     // elements of the bf16 scratch
  void* a_rounded_ = nullptr; // bf16 device memory, for bf16 products only
  void* b_rounded_ = nullptr;
};
#endif

} // namespace gpt
