#pragma once
// Initial and final weights. From .npy files named as nanoGPT names its state_dict (what
// reference.py writes), or drawn as nanoGPT draws them: weights and embeddings N(0, 0.02), biases
// 0, LayerNorm weights 1. Weights are drawn and read whole, so that a run starts from the same
// model at any tensor-parallel size; each rank then keeps its slices (one float array per engine
// layer), and the final slices are joined back into whole tensors for --save-npy.

#include "../common/finite_values.hpp"
#include "../train_mlp/npy.hpp"
#include "gpt.hpp"

#include <zero/tensor_parallel/slices.hpp>

#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace train_gpt {

// One float array per whole tensor, in gpt::tensor_specs order.
using WholeTensors = std::vector<std::vector<float>>;

namespace detail {
// The tensor's shape as the slicing functions see it: [rows, cols], a vector one column.
inline std::size_t columns(const gpt::TensorSpec& t) {
  return t.cols ? t.cols : 1;
}
} // namespace detail

// Rank `rank`'s slice of a whole tensor (the vocabulary padded with zero rows first).
inline std::vector<float> slice_of(const gpt::Config& model, const gpt::TensorSpec& t,
                                   std::span<const float> whole, int rank) {
  const zero::TensorSlice slice{rank, int(model.tensor_parallel)};
  const std::size_t cols = detail::columns(t);
  switch (t.cut) {
  case gpt::Cut::whole:
    return {whole.begin(), whole.end()};
  case gpt::Cut::rows:
    return zero::slice_rows(whole, t.rows, cols, slice, t.name);
  case gpt::Cut::columns:
    return zero::slice_columns(whole, t.rows, cols, slice, t.name);
  case gpt::Cut::qkv_rows:
    return zero::slice_fused_rows(whole, 3, t.rows / 3, cols, slice, t.name);
  case gpt::Cut::vocabulary: {
    std::vector<float> padded(whole.begin(), whole.end());
    padded.resize(model.padded_vocab() * cols, 0.0f);
    return zero::slice_rows(padded, model.padded_vocab(), cols, slice, t.name);
  }
  }
  return {};
}

// The whole tensor from every rank's slice, in rank order (the heads re-interleaved, the
// vocabulary's padding dropped), as a checkpoint's consolidation joins them.
inline std::vector<float> join_slices(const gpt::Config& model, const gpt::TensorSpec& t,
                                      std::span<const std::vector<float>> slices) {
  const auto split = gpt::split_of(t);
  if (!split) return slices[0];
  const auto [rows, cols] = gpt::local_shape(model, t.cut, t.rows, detail::columns(t));
  return zero::join_split(slices, t.cols ? std::vector{rows, cols} : std::vector{rows}, *split,
                          t.name);
}

// This rank's engine layers from the whole tensors.
inline std::vector<std::vector<float>> layers_of(const gpt::Config& model,
                                                 const WholeTensors& whole, int rank) {
  std::vector<std::vector<float>> layers;
  const std::vector<gpt::TensorSpec> tensors = gpt::tensor_specs(model);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::size_t l = std::size_t(tensors[i].layer);
    if (layers.size() <= l) layers.resize(l + 1);
    const std::vector<float> mine = slice_of(model, tensors[i], whole[i], rank);
    layers[l].insert(layers[l].end(), mine.begin(), mine.end());
  }
  return layers;
}

// Each tensor's slice out of this rank's engine layers, in gpt::tensor_specs order.
inline WholeTensors slices_in(const gpt::Config& model,
                              const std::vector<std::vector<float>>& layers) {
  WholeTensors out;
  std::vector<std::size_t> offset(layers.size(), 0);
  for (const zero::ParameterSpec& p : gpt::specs(model)) {
    const std::size_t l = std::size_t(p.layer);
    const float* at = layers[l].data() + offset[l];
    out.emplace_back(at, at + p.numel);
    offset[l] += p.numel;
  }
  return out;
}

struct InitialWeights {
  static WholeTensors random(const gpt::Config& model, unsigned seed) {
    WholeTensors w;
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const gpt::TensorSpec& t : gpt::tensor_specs(model)) {
      const bool bias = t.name.ends_with(".bias");
      const bool norm = t.name.find(".ln_") != std::string::npos;
      std::vector<float>& values = w.emplace_back();
      for (std::size_t i = 0; i < t.rows * detail::columns(t); ++i)
        values.push_back(bias ? 0.0f : norm ? 1.0f : normal(generator));
    }
    return w;
  }

  static WholeTensors from_npy(const gpt::Config& model, const std::string& dir) {
    WholeTensors w;
    for (const gpt::TensorSpec& t : gpt::tensor_specs(model)) {
      const std::vector<std::size_t> shape =
          t.cols ? std::vector{t.rows, t.cols} : std::vector{t.rows};
      const std::string path = (std::filesystem::path(dir) / (t.name + ".npy")).string();
      const npy::Array a = npy::load(path);
      zero::require(a.shape == shape,
                    path + ": shape " + shape_text(a.shape) + ", the model's " + t.name + " is " +
                        shape_text(shape),
                    zero::ErrorKind::invalid_argument);
      examples::require_finite(path, a.data, a.shape.size() < 2 ? 1 : a.shape.back());
      w.push_back(a.data);
    }
    return w;
  }

  static std::string shape_text(const std::vector<std::size_t>& shape) {
    std::string s = "[";
    for (std::size_t d : shape)
      s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + "]";
  }
};

// Writes every whole tensor as DIR/<name>.npy.
inline void save_npy(const gpt::Config& model, const std::string& dir, const WholeTensors& whole) {
  zero::DirectoryHandle::open_named(dir, "--save-npy", 0755); // created where missing
  const std::vector<gpt::TensorSpec> tensors = gpt::tensor_specs(model);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const gpt::TensorSpec& t = tensors[i];
    const std::vector<std::size_t> shape =
        t.cols ? std::vector{t.rows, t.cols} : std::vector{t.rows};
    npy::save((std::filesystem::path(dir) / (t.name + ".npy")).string(), shape, whole[i].data());
  }
}

} // namespace train_gpt
