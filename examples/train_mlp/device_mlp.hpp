#pragma once
// The demo's model on a CUDA device (--device cuda): mlp.hpp's Linear layers, activation and
// loss as cuBLAS calls and small kernels on one stream, in float, on weights the caller widened
// to float from the engine's compute type (device_training.hpp, as the host model does), so that
// the two differ only in how cuBLAS and OpenBLAS order their sums. Compiled in device_mlp.cu; no
// cuBLAS type appears here (mlp.hpp brings Activation, Loss and OpenBLAS's header).

#include "mlp.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace mlp {

// Forward and backward of one layer, the activation and the loss, queued on `stream`. Every
// pointer is device memory; sizes as mlp.hpp's host functions.
class DeviceModel {
 public:
  // `max_rows`: the most rows a call is given (a micro-step's).
  DeviceModel(cudaStream_t stream, std::size_t max_rows);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  cudaStream_t stream() const noexcept { return stream_; }

  // out[r] = source row (first + r) modulo source_rows, for r < rows: a micro-step's share of
  // the data, which wraps around the end of the data as Dataset::x_row does.
  void gather_rows(const float* source, std::size_t source_rows, std::size_t width,
                   std::size_t first, std::size_t rows, float* out) const;
  // z = x W^T + b (W is [out, in], row-major as torch.nn.Linear).
  void linear_forward(const float* x, const float* w, const float* b, float* z, std::size_t rows,
                      std::size_t in, std::size_t out) const;
  // dW = dz^T x, db = column sums of dz, and dx = dz W when dx is not null (rows <= max_rows).
  void linear_backward(const float* x, const float* w, const float* dz, float* dw, float* db,
                       float* dx, std::size_t rows, std::size_t in, std::size_t out) const;
  // a = activation(z), elementwise.
  void activate(Activation a, const float* z, float* out, std::size_t n) const;
  // delta[i] *= activation'(z[i]) (given the activation's value a[i], which tanh's reuses).
  void activation_backward(Activation a, const float* z, const float* value, float* delta,
                           std::size_t n) const;
  // The loss's gradient (scaled by `scale`, mean over rows, and over outputs for MSE) into
  // `gradient`, and the loss itself added to *loss_sum (one double in device memory), summed in
  // an order fixed whatever the device: the same bits from run to run.
  void loss_and_gradient(Loss loss, const float* prediction, const float* target, float* gradient,
                         std::size_t rows, std::size_t outputs, float scale,
                         double* loss_sum) const;

 private:
  cudaStream_t stream_;
  std::size_t max_rows_;
  void* blas_ = nullptr;  // cublasHandle_t, bound to stream_ (cuBLAS stays out of this header)
  float* ones_ = nullptr; // max_rows ones: the bias gradient is a product with them
  // The loss's partial sums (a block's or a row's), added in a fixed order into the loss.
  double* loss_partials_ = nullptr;

  void release() noexcept;
};

} // namespace mlp
