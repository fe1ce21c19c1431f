#pragma once
// A toy loop for the activation-checkpointing tests: residual layers with dropout.

#include "zero/core/view.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace zero::testing {

inline std::vector<float> ramp(std::size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = scale * std::sin(0.37f * float(i) + shift);
  return v;
}

// Residual layers x + dropout(tanh(x W^T)) on `rows` rows of `width`; each layer saves its
// pre-activation and its dropout mask. Weights come from `weights(l)`; gradients go to
// `gradients(l)`, overwritten.
struct ToyLayers {
  std::size_t count = 7, width = 12, rows = 3;
  float drop = 0.25f;
  std::mt19937* generator = nullptr; // dropout's randomness; none without
  std::function<const float*(std::size_t)> weights;
  std::function<void(std::size_t, const std::vector<float>&)> gradients;
  std::size_t forward_calls = 0;

  std::size_t layers() const { return count; }
  std::size_t activation_elements() const { return rows * width; }
  std::size_t saved_elements(std::size_t) const { return 2 * rows * width; }

  void forward(std::size_t l, zero::View<const float> in, zero::View<float> out,
               zero::View<float> saved) {
    ++forward_calls;
    const float* w = weights(l);
    float* z = saved.data();
    float* mask = saved.data() + rows * width;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o) {
        float sum = 0;
        for (std::size_t i = 0; i < width; ++i)
          sum += in[r * width + i] * w[o * width + i];
        z[r * width + o] = sum;
        mask[r * width + o] = generator
                                  ? (std::uniform_real_distribution<float>(0, 1)(*generator) < drop
                                         ? 0.0f
                                         : 1.0f / (1.0f - drop))
                                  : 1.0f;
        out[r * width + o] = in[r * width + o] + std::tanh(sum) * mask[r * width + o];
      }
  }

  void backward(std::size_t l, zero::View<const float> in, zero::View<const float> saved,
                zero::View<const float> grad_out, zero::View<float> grad_in) {
    const float* w = weights(l);
    const float* z = saved.data();
    const float* mask = saved.data() + rows * width;
    std::vector<float> dw(width * width, 0.0f), dz(rows * width);
    for (std::size_t k = 0; k < rows * width; ++k) {
      const float t = std::tanh(z[k]);
      dz[k] = grad_out[k] * mask[k] * (1 - t * t);
    }
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o)
        for (std::size_t i = 0; i < width; ++i)
          dw[o * width + i] += dz[r * width + o] * in[r * width + i];
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < width; ++i) {
        float sum = grad_out[r * width + i];
        for (std::size_t o = 0; o < width; ++o)
          sum += dz[r * width + o] * w[o * width + i];
        grad_in[r * width + i] = sum;
      }
    gradients(l, dw);
  }
};

// example-begin random-state-hook
// The generator's whole state, saved and restored.
struct GeneratorState {
  std::mt19937* generator;
  using state_type = std::mt19937;
  state_type save() const { return *generator; }
  void restore(const state_type& state) const { *generator = state; }
};
// example-end random-state-hook

} // namespace zero::testing
