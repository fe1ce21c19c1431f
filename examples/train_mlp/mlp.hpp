#pragma once
// The demo's model: an MLP of Linear layers (weight [out, in] and bias, as torch.nn.Linear), an
// activation between layers (none after the last), and MSE averaged over batch and outputs (or
// cross-entropy against target distributions). Forward and backward for one layer at a time, in
// float, with OpenBLAS; the weights come from the engine in the compute type.

#include <zero/shard/parameter.hpp>

#include <cblas.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace mlp {

enum class Activation { tanh, gelu };
enum class Loss { mse, cross_entropy };

struct Shape {
  std::vector<std::size_t> widths; // input, hidden..., output
  Activation activation = Activation::tanh;
  Loss loss = Loss::mse;

  std::size_t layers() const { return widths.size() - 1; }
  std::size_t in(std::size_t l) const { return widths[l]; }
  std::size_t out(std::size_t l) const { return widths[l + 1]; }
  std::size_t parameters() const {
    std::size_t total = 0;
    for (std::size_t l = 0; l < layers(); ++l)
      total += out(l) * in(l) + out(l);
    return total;
  }
  // What the engine registers: layer l is layer l, weight then bias.
  std::vector<zero::ParameterSpec> specs() const {
    std::vector<zero::ParameterSpec> specs;
    for (std::size_t l = 0; l < layers(); ++l) {
      const int layer = static_cast<int>(l);
      // Shapes as torch.nn.Linear's: weight [out, in], bias [out].
      specs.push_back({"layer" + std::to_string(l) + ".weight",
                       out(l) * in(l),
                       zero::DType::float32,
                       layer,
                       {out(l), in(l)}});
      specs.push_back(
          {"layer" + std::to_string(l) + ".bias", out(l), zero::DType::float32, layer, {out(l)}});
    }
    return specs;
  }
};

inline float activate(Activation a, float z) {
  if (a == Activation::tanh) return std::tanh(z);
  return 0.5f * z * (1.0f + std::erf(z * 0.70710678f)); // GELU as torch's default (erf)
}
// d activation / dz, from z (and the activation's value, which tanh's derivative reuses).
inline float activation_slope(Activation a, float z, float value) {
  if (a == Activation::tanh) return 1.0f - value * value;
  const float cdf = 0.5f * (1.0f + std::erf(z * 0.70710678f));
  const float pdf = 0.39894228f * std::exp(-0.5f * z * z);
  return cdf + z * pdf;
}

// z = x W^T + b for `rows` rows; W is [out, in].
inline void linear_forward(const float* x, const float* w, const float* b, float* z,
                           std::size_t rows, std::size_t in, std::size_t out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o)
      z[r * out + o] = b[o];
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out), int(in), 1.0f, x,
              int(in), w, int(in), 1.0f, z, int(out));
}

// From dz ([rows, out]): dW = dz^T x, db = column sums of dz, and (when dx is given) dx = dz W.
inline void linear_backward(const float* x, const float* w, const float* dz, float* dw, float* db,
                            float* dx, std::size_t rows, std::size_t in, std::size_t out) {
  for (std::size_t o = 0; o < out; ++o) {
    float sum = 0;
    for (std::size_t r = 0; r < rows; ++r)
      sum += dz[r * out + o];
    db[o] = sum;
  }
  if (rows == 0) {
    std::fill(dw, dw + out * in, 0.0f);
    if (dx) std::fill(dx, dx, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(out), int(in), int(rows), 1.0f, dz,
              int(out), x, int(in), 0.0f, dw, int(in));
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(in), int(out), 1.0f, dz,
                int(out), w, int(in), 0.0f, dx, int(in));
}

// The loss of `rows` predictions and its gradient, scaled by `scale` (the loss scale), with the
// mean taken over `rows` (and the outputs, for MSE).
inline double loss_and_gradient(Loss loss, const float* prediction, const float* target,
                                float* gradient, std::size_t rows, std::size_t outputs,
                                float scale) {
  double total = 0;
  if (loss == Loss::mse) {
    const double n = double(rows) * double(outputs);
    for (std::size_t i = 0; i < rows * outputs; ++i) {
      const double d = double(prediction[i]) - double(target[i]);
      total += d * d;
      gradient[i] = static_cast<float>(2.0 * d / n) * scale;
    }
    return rows ? total / n : 0.0;
  }
  for (std::size_t r = 0; r < rows; ++r) { // softmax cross-entropy against a target distribution
    const float* p = prediction + r * outputs;
    float top = p[0];
    for (std::size_t o = 1; o < outputs; ++o)
      top = std::max(top, p[o]);
    double sum = 0;
    for (std::size_t o = 0; o < outputs; ++o)
      sum += std::exp(double(p[o] - top));
    for (std::size_t o = 0; o < outputs; ++o) {
      const double log_softmax = double(p[o] - top) - std::log(sum);
      total -= double(target[r * outputs + o]) * log_softmax;
      gradient[r * outputs + o] =
          static_cast<float>((std::exp(log_softmax) - target[r * outputs + o]) / double(rows)) *
          scale;
    }
  }
  return rows ? total / double(rows) : 0.0;
}

} // namespace mlp
