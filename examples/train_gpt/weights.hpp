#pragma once
// Initial and final weights, one float array per engine layer. From .npy files named as nanoGPT
// names its state_dict (what reference.py writes), or drawn as nanoGPT draws them: weights and
// embeddings N(0, 0.02), biases 0, LayerNorm weights 1.

#include "../common/finite_values.hpp"
#include "../train_mlp/npy.hpp"
#include "gpt.hpp"

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace train_gpt {

struct InitialWeights {
  std::vector<std::vector<float>> layers;

  static InitialWeights random(const gpt::Config& model, unsigned seed) {
    InitialWeights w;
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const zero::ParameterSpec& p : gpt::specs(model)) {
      if (w.layers.size() <= std::size_t(p.layer)) w.layers.resize(std::size_t(p.layer) + 1);
      const bool bias = p.name.ends_with(".bias");
      const bool norm = p.name.find(".ln_") != std::string::npos;
      for (std::size_t i = 0; i < p.numel; ++i)
        w.layers[std::size_t(p.layer)].push_back(bias ? 0.0f : norm ? 1.0f : normal(generator));
    }
    return w;
  }

  static InitialWeights from_npy(const gpt::Config& model, const std::string& dir) {
    InitialWeights w;
    for (const zero::ParameterSpec& p : gpt::specs(model)) {
      const std::string path = (std::filesystem::path(dir) / (p.name + ".npy")).string();
      const npy::Array a = npy::load(path);
      zero::require(a.shape == p.shape,
                    path + ": shape " + shape_text(a.shape) + ", the model's " + p.name + " is " +
                        shape_text(p.shape),
                    zero::ErrorKind::invalid_argument);
      examples::require_finite(path, a.data, a.shape.size() < 2 ? 1 : a.shape.back());
      if (w.layers.size() <= std::size_t(p.layer)) w.layers.resize(std::size_t(p.layer) + 1);
      auto& layer = w.layers[std::size_t(p.layer)];
      layer.insert(layer.end(), a.data.begin(), a.data.end());
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

// Writes every parameter as DIR/<name>.npy from the layers' values.
inline void save_npy(const gpt::Config& model, const std::string& dir,
                     const std::vector<std::vector<float>>& layers) {
  zero::DirectoryHandle::open_named(dir, "--save-npy", 0755); // created where missing
  std::vector<std::size_t> offset(layers.size(), 0);
  for (const zero::ParameterSpec& p : gpt::specs(model)) {
    const std::size_t l = std::size_t(p.layer);
    npy::save((std::filesystem::path(dir) / (p.name + ".npy")).string(), p.shape,
              layers[l].data() + offset[l]);
    offset[l] += p.numel;
  }
}

} // namespace train_gpt
