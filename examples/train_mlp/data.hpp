#pragma once
// The demo's data and initial weights: a deterministic synthetic teacher task (a fixed random MLP
// labels Gaussian inputs) or arrays from .npy files, and weights initialised like torch.nn.Linear
// (uniform in ±1/sqrt(in)) or read from .npy files.

#include "../common/finite_values.hpp"
#include "mlp.hpp"
#include "npy.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace train {

// A small reproducible generator (SplitMix64), so every rank draws the same numbers.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; } // [0, 1)
  double normal() {
    const double u = uniform() + 0x1.0p-54, v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  std::uint64_t state_;
};

struct Dataset {
  std::size_t inputs = 0, outputs = 0, rows = 0;
  std::vector<float> x, y; // row-major

  const float* x_row(std::size_t r) const { return x.data() + (r % rows) * inputs; }
  const float* y_row(std::size_t r) const { return y.data() + (r % rows) * outputs; }
};

// Per layer: the weight ([out, in]) and the bias, end to end, as the engine registers them.
using Weights = std::vector<std::vector<float>>;

// A layer drawn like torch.nn.Linear: uniform in ±1/sqrt(in), weight then bias.
inline std::vector<float> torch_like_layer(const mlp::Shape& shape, std::size_t l, Random& random) {
  const double bound = 1.0 / std::sqrt(double(shape.in(l)));
  std::vector<float> w(shape.out(l) * shape.in(l) + shape.out(l));
  for (float& v : w)
    v = static_cast<float>((2 * random.uniform() - 1) * bound);
  return w;
}

inline std::vector<float> load_layer(const std::string& dir, const mlp::Shape& shape,
                                     std::size_t l) {
  const std::string base = dir + "/layer" + std::to_string(l);
  const npy::Array w = npy::load(base + ".weight.npy");
  const npy::Array b = npy::load(base + ".bias.npy");
  zero::require(w.shape.size() == 2 && w.shape[0] == shape.out(l) && w.shape[1] == shape.in(l),
                base + ".weight.npy: expected shape (" + std::to_string(shape.out(l)) + ", " +
                    std::to_string(shape.in(l)) + ") for --layers");
  zero::require(b.data.size() == shape.out(l),
                base + ".bias.npy: expected " + std::to_string(shape.out(l)) + " values");
  examples::require_finite(base + ".weight.npy", w.data, w.cols());
  examples::require_finite(base + ".bias.npy", b.data, 1);
  std::vector<float> layer = w.data;
  layer.insert(layer.end(), b.data.begin(), b.data.end());
  return layer;
}

// The initial weights, one layer at a time and in order, so that a model larger than memory never
// holds them all at once: drawn from `seed` (one stream over the layers, as a whole-model draw
// would be) or read from DIR/layer{i}.weight.npy and layer{i}.bias.npy.
class InitialWeights {
 public:
  InitialWeights(const mlp::Shape& shape, std::uint64_t seed) : shape_(shape), random_(seed) {}
  InitialWeights(const mlp::Shape& shape, std::string npy_dir)
      : shape_(shape), random_(0), npy_dir_(std::move(npy_dir)) {}

  std::vector<float> layer(std::size_t l) {
    zero::require(l == next_, "initial weights are produced in layer order: asked for layer " +
                                  std::to_string(l) + ", next is " + std::to_string(next_));
    ++next_;
    return npy_dir_.empty() ? torch_like_layer(shape_, l, random_)
                            : load_layer(npy_dir_, shape_, l);
  }

 private:
  mlp::Shape shape_;
  Random random_;
  std::string npy_dir_;
  std::size_t next_ = 0;
};

inline void save_weights(const std::string& dir, const mlp::Shape& shape, const Weights& weights) {
  for (std::size_t l = 0; l < shape.layers(); ++l) {
    const std::string base = dir + "/layer" + std::to_string(l);
    npy::save(base + ".weight.npy", {shape.out(l), shape.in(l)}, weights[l].data());
    npy::save(base + ".bias.npy", {shape.out(l)}, weights[l].data() + shape.out(l) * shape.in(l));
  }
}

// A teacher of the same shape labels Gaussian inputs; the student learns to imitate it.
inline Dataset teacher_task(const mlp::Shape& shape, std::size_t rows, std::uint64_t seed) {
  Dataset d{shape.widths.front(), shape.widths.back(), rows, {}, {}};
  Random random(seed ^ 0x5eedull);
  d.x.resize(rows * d.inputs);
  for (float& v : d.x)
    v = static_cast<float>(random.normal());
  InitialWeights teacher(shape, seed + 1000);
  std::vector<float> a(d.x), z;
  for (std::size_t l = 0; l < shape.layers(); ++l) {
    z.assign(rows * shape.out(l), 0.0f);
    const std::vector<float> layer = teacher.layer(l);
    const float* w = layer.data();
    // Teacher weights are scaled up so that the task is not trivially linear.
    std::vector<float> scaled(w, w + shape.out(l) * shape.in(l));
    for (float& v : scaled)
      v *= 2.0f;
    mlp::linear_forward(a.data(), scaled.data(), w + scaled.size(), z.data(), rows, shape.in(l),
                        shape.out(l));
    if (l + 1 < shape.layers())
      for (float& v : z)
        v = mlp::activate(shape.activation, v);
    a.swap(z);
  }
  if (shape.loss == mlp::Loss::cross_entropy) // targets: the teacher's softmax
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = a.data() + r * d.outputs;
      float top = row[0];
      for (std::size_t o = 1; o < d.outputs; ++o)
        top = std::max(top, row[o]);
      double sum = 0;
      for (std::size_t o = 0; o < d.outputs; ++o)
        sum += std::exp(double(row[o] - top));
      for (std::size_t o = 0; o < d.outputs; ++o)
        row[o] = float(std::exp(double(row[o] - top)) / sum);
    }
  d.y = std::move(a);
  return d;
}

inline Dataset load_dataset(const std::string& dir, const mlp::Shape& shape) {
  const npy::Array x = npy::load(dir + "/x.npy");
  const npy::Array y = npy::load(dir + "/y.npy");
  zero::require(x.shape.size() == 2 && x.cols() == shape.widths.front(),
                dir + "/x.npy: expected rows x " + std::to_string(shape.widths.front()) +
                    " (the input width)");
  zero::require(y.shape.size() == 2 && y.cols() == shape.widths.back(),
                dir + "/y.npy: expected rows x " + std::to_string(shape.widths.back()) +
                    " (the output width)");
  zero::require(x.rows() == y.rows() && x.rows() > 0,
                dir + ": x.npy and y.npy need the same, non-zero, row count");
  examples::require_finite(dir + "/x.npy", x.data, x.cols());
  examples::require_finite(dir + "/y.npy", y.data, y.cols());
  return Dataset{x.cols(), y.cols(), x.rows(), x.data, y.data};
}

} // namespace train
