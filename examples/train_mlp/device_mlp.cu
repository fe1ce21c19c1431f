// The demo's model on a CUDA device: cuBLAS for the Linear layers' products (fp32, as the host
// model's OpenBLAS calls), grid-stride kernels for the rest. See device_mlp.hpp.

#include "device_mlp.hpp"

#include <zero/core/cuda_check.hpp>
#include <zero/core/error.hpp>

#include "../common/cublas_check.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <utility>

namespace mlp {
namespace {

using examples::blas_handle;
using examples::check_blas;

constexpr int threads = 256;
constexpr std::size_t max_blocks = 4096;
// Enough blocks to fill the device with a grid-stride loop, never more than the elements need.
unsigned blocks(std::size_t n) {
  return unsigned(std::clamp<std::size_t>((n + threads - 1) / threads, 1, max_blocks));
}

void check_launch() {
  ZERO_CHECK_CUDA(cudaGetLastError());
}

// Calls f(i) for every i < n this thread takes in a grid-stride loop (the launch's threads take
// every index once, whatever the grid's size).
template <class F>
__device__ void for_each_index(std::size_t n, F f) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    f(i);
}

__global__ void gather_rows_kernel(const float* source, std::size_t source_rows, std::size_t width,
                                   std::size_t first, std::size_t rows, float* out) {
  for_each_index(rows * width, [&](std::size_t i) {
    const std::size_t r = i / width, c = i % width;
    out[i] = source[((first + r) % source_rows) * width + c];
  });
}

// z[r, o] = b[o], before the product adds x W^T.
__global__ void broadcast_bias_kernel(const float* b, float* z, std::size_t rows, std::size_t out) {
  for_each_index(rows * out, [&](std::size_t i) { z[i] = b[i % out]; });
}

__global__ void fill_kernel(float* data, std::size_t n, float value) {
  for_each_index(n, [&](std::size_t i) { data[i] = value; });
}

__device__ float activate_one(Activation a, float z) {
  if (a == Activation::tanh) return tanhf(z);
  return 0.5f * z * (1.0f + erff(z * 0.70710678f));
}

__device__ float slope_one(Activation a, float z, float value) {
  if (a == Activation::tanh) return 1.0f - value * value;
  const float cdf = 0.5f * (1.0f + erff(z * 0.70710678f));
  const float pdf = 0.39894228f * expf(-0.5f * z * z);
  return cdf + z * pdf;
}

__global__ void activate_kernel(Activation a, const float* z, float* out, std::size_t n) {
  for_each_index(n, [&](std::size_t i) { out[i] = activate_one(a, z[i]); });
}

__global__ void activation_backward_kernel(Activation a, const float* z, const float* value,
                                           float* delta, std::size_t n) {
  for_each_index(n, [&](std::size_t i) { delta[i] *= slope_one(a, z[i], value[i]); });
}

// The sum of the block sums of squares in block_sums[blockIdx.x], each a fixed-order tree over
// the block's threads (the grid depends on n only); fixed_order_sum_kernel adds them in order.
__global__ void mse_kernel(const float* prediction, const float* target, float* gradient,
                           std::size_t n, float scale, double* block_sums) {
  __shared__ double partial[threads];
  double mine = 0;
  for_each_index(n, [&](std::size_t i) {
    const double d = double(prediction[i]) - double(target[i]);
    mine += d * d;
    gradient[i] = static_cast<float>(2.0 * d / double(n)) * scale;
  });
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) block_sums[blockIdx.x] = partial[0];
}

// Softmax cross-entropy against a target distribution: a thread per row, each row's loss into
// row_losses[r].
__global__ void cross_entropy_kernel(const float* prediction, const float* target, float* gradient,
                                     std::size_t rows, std::size_t outputs, float scale,
                                     double* row_losses) {
  for_each_index(rows, [&](std::size_t r) {
    const float* p = prediction + r * outputs;
    float top = p[0];
    for (std::size_t o = 1; o < outputs; ++o)
      top = fmaxf(top, p[o]);
    double sum = 0;
    for (std::size_t o = 0; o < outputs; ++o)
      sum += exp(double(p[o] - top));
    double total = 0;
    for (std::size_t o = 0; o < outputs; ++o) {
      const double log_softmax = double(p[o] - top) - log(sum);
      const double t = target[r * outputs + o];
      total -= t * log_softmax;
      gradient[r * outputs + o] = static_cast<float>((exp(log_softmax) - t) / double(rows)) * scale;
    }
    row_losses[r] = total;
  });
}

// *sum += (values[0] + ... + values[count - 1]) / divisor, in an order fixed whatever the device
// (one block: thread t adds values t, t + 256, ... in turn, then a fixed tree over the threads),
// so that the reported loss is the same bits from run to run, where atomic additions of the
// blocks' sums came in any order.
__global__ void fixed_order_sum_kernel(const double* values, std::size_t count, double divisor,
                                       double* sum) {
  __shared__ double partial[threads];
  double mine = 0;
  for (std::size_t i = threadIdx.x; i < count; i += blockDim.x)
    mine += values[i];
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum += partial[0] / divisor;
}

} // namespace

DeviceModel::DeviceModel(cudaStream_t stream, std::size_t max_rows)
    : stream_(stream), max_rows_(max_rows) {
  cublasHandle_t h = nullptr;
  check_blas(cublasCreate(&h), "cublasCreate");
  blas_ = h;
  try { // a failure past here gives back what was taken (the destructor does not run)
    check_blas(cublasSetStream(h, stream), "cublasSetStream");
    // fp32 products in fp32: cuBLAS's default math uses no TF32 for cublasSgemm (torch's
    // allow_tf32 = False). With CUBLAS_PEDANTIC_MATH and a thread per column for the bias
    // gradient, stage 0 took 7.08 ms against 6.78 with both changed (on an H100).
    check_blas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    ZERO_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ones_),
                               std::max<std::size_t>(max_rows, 1) * sizeof(float)));
    // The loss's partial sums: one per block of the MSE kernel (at most blocks()'s 4096), or
    // one per row of cross-entropy.
    ZERO_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&loss_partials_),
                               std::max<std::size_t>(max_rows, max_blocks) * sizeof(double)));
    fill_kernel<<<blocks(max_rows), threads, 0, stream_>>>(ones_, max_rows, 1.0f);
    check_launch();
  } catch (...) {
    release();
    throw;
  }
}

DeviceModel::~DeviceModel() {
  release();
}

void DeviceModel::release() noexcept {
  if (ones_) ZERO_LOG_CUDA(cudaFree(std::exchange(ones_, nullptr)));
  if (loss_partials_) ZERO_LOG_CUDA(cudaFree(std::exchange(loss_partials_, nullptr)));
  if (blas_) cublasDestroy(blas_handle(std::exchange(blas_, nullptr)));
}

void DeviceModel::gather_rows(const float* source, std::size_t source_rows, std::size_t width,
                              std::size_t first, std::size_t rows, float* out) const {
  if (rows * width == 0) return;
  gather_rows_kernel<<<blocks(rows * width), threads, 0, stream_>>>(source, source_rows, width,
                                                                    first, rows, out);
  check_launch();
}

// Row-major [rows, cols] is column-major [cols, rows]: cuBLAS sees every matrix transposed, so
// z^T = W x^T with W^T stored (ld in) and x^T stored (ld in).
void DeviceModel::linear_forward(const float* x, const float* w, const float* b, float* z,
                                 std::size_t rows, std::size_t in, std::size_t out) const {
  if (rows == 0) return;
  broadcast_bias_kernel<<<blocks(rows * out), threads, 0, stream_>>>(b, z, rows, out);
  check_launch();
  const float one = 1.0f;
  check_blas(cublasSgemm(blas_handle(blas_), CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in),
                         &one, w, int(in), x, int(in), &one, z, int(out)),
             "cublasSgemm (forward)");
}

// dW^T = x^T dz (column-major [in, out]); db = dz^T 1, a product with ones (a thread per column
// summing its rows, the host's loop, leaves most of the GPU idle); dx^T = W^T dz^T (column-major
// [in, rows]).
void DeviceModel::linear_backward(const float* x, const float* w, const float* dz, float* dw,
                                  float* db, float* dx, std::size_t rows, std::size_t in,
                                  std::size_t out) const {
  if (rows == 0) {
    ZERO_CHECK_CUDA(cudaMemsetAsync(dw, 0, out * in * sizeof(float), stream_));
    ZERO_CHECK_CUDA(cudaMemsetAsync(db, 0, out * sizeof(float), stream_));
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  check_blas(cublasSgemv(blas_handle(blas_), CUBLAS_OP_N, int(out), int(rows), &one, dz, int(out),
                         ones_, 1, &zero, db, 1),
             "cublasSgemv (bias gradient)");
  check_blas(cublasSgemm(blas_handle(blas_), CUBLAS_OP_N, CUBLAS_OP_T, int(in), int(out), int(rows),
                         &one, x, int(in), dz, int(out), &zero, dw, int(in)),
             "cublasSgemm (weight gradient)");
  if (dx)
    check_blas(cublasSgemm(blas_handle(blas_), CUBLAS_OP_N, CUBLAS_OP_N, int(in), int(rows),
                           int(out), &one, w, int(in), dz, int(out), &zero, dx, int(in)),
               "cublasSgemm (input gradient)");
}

void DeviceModel::activate(Activation a, const float* z, float* out, std::size_t n) const {
  if (n == 0) return;
  activate_kernel<<<blocks(n), threads, 0, stream_>>>(a, z, out, n);
  check_launch();
}

void DeviceModel::activation_backward(Activation a, const float* z, const float* value,
                                      float* delta, std::size_t n) const {
  if (n == 0) return;
  activation_backward_kernel<<<blocks(n), threads, 0, stream_>>>(a, z, value, delta, n);
  check_launch();
}

void DeviceModel::loss_and_gradient(Loss loss, const float* prediction, const float* target,
                                    float* gradient, std::size_t rows, std::size_t outputs,
                                    float scale, double* loss_sum) const {
  if (rows == 0) return;
  if (loss == Loss::mse) {
    const std::size_t n = rows * outputs;
    mse_kernel<<<blocks(n), threads, 0, stream_>>>(prediction, target, gradient, n, scale,
                                                   loss_partials_);
    check_launch();
    fixed_order_sum_kernel<<<1, threads, 0, stream_>>>(loss_partials_, blocks(n), double(n),
                                                       loss_sum);
  } else {
    zero::require(rows <= max_rows_, "DeviceModel::loss_and_gradient: " + std::to_string(rows) +
                                         " rows, more than the " + std::to_string(max_rows_) +
                                         " it was built for");
    cross_entropy_kernel<<<blocks(rows), threads, 0, stream_>>>(prediction, target, gradient, rows,
                                                                outputs, scale, loss_partials_);
    check_launch();
    fixed_order_sum_kernel<<<1, threads, 0, stream_>>>(loss_partials_, rows, double(rows),
                                                       loss_sum);
  }
  check_launch();
}

} // namespace mlp
