#pragma once
// The parameter list a layout is built from, checked once and indexed: element offsets, layers in
// ascending id order and a name index. Partitioners never see a list that fails these checks.

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/detail/hash.hpp"
#include "zero/shard/parameter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zero::detail {

// "'fc1.weight' (1024 x float, layer 3)": how errors name a parameter.
inline std::string describe_parameter(const ParameterSpec& p) {
  return "'" + p.name + "' (" + std::to_string(p.numel) + " x " + to_string(p.dtype) + ", layer " +
         std::to_string(p.layer) +
         (p.replicated_over_tensor_parallel ? ", replicated over tensor parallelism)" : ")");
}

inline std::uint64_t parameter_hash(const ParameterSpec& p) noexcept {
  LayoutHasher h;
  h.add(p.name);
  h.add(static_cast<std::uint64_t>(p.numel));
  h.add(static_cast<std::uint64_t>(p.dtype));
  h.add(static_cast<std::uint64_t>(static_cast<std::int64_t>(p.layer)));
  if (p.replicated_over_tensor_parallel) h.add(std::uint64_t{1}); // other hashes unchanged
  return h.value();
}

struct ParameterTable {
  std::vector<ParameterSpec> parameters;
  std::vector<std::size_t> element_offsets;    // one per parameter, then the total
  std::vector<std::size_t> layer_of;           // layer index of each parameter
  std::vector<std::size_t> layer_members;      // parameter indices, layer by layer
  std::vector<std::size_t> layer_member_begin; // where each layer starts in layer_members, then end
  std::vector<LayerInfo> layers;               // id, dtype and numel; the rest is the layout's
  struct NameKey {
    std::uint64_t hash;
    std::size_t parameter;
  };
  std::vector<NameKey> by_name; // named parameters, by name hash (then name): cheap to sort
  std::uint64_t hash = 0;       // of the parameter list, in order

  explicit ParameterTable(std::span<const ParameterSpec> specs)
      : parameters(specs.begin(), specs.end()) {
    const std::size_t n = parameters.size();
    element_offsets.resize(n + 1);
    LayoutHasher h;
    h.add(static_cast<std::uint64_t>(n));
    std::size_t total = 0;
    for (std::size_t p = 0; p < n; ++p) {
      element_offsets[p] = total;
      if (parameters[p].numel > SIZE_MAX - total)
        fail(ErrorKind::invalid_argument,
             "shard layout: the parameters' sizes overflow std::size_t at " +
                 describe_parameter(parameters[p]));
      total += parameters[p].numel;
      h.add(parameter_hash(parameters[p]));
    }
    element_offsets[n] = total;
    hash = h.value();
    index_layers();
    index_names();
  }

  std::size_t numel() const noexcept { return element_offsets.back(); }
  std::size_t layer_count() const noexcept { return layers.size(); }
  std::span<const std::size_t> members(std::size_t g) const noexcept {
    return {layer_members.data() + layer_member_begin[g],
            layer_member_begin[g + 1] - layer_member_begin[g]};
  }

  std::optional<std::size_t> find(std::string_view name) const {
    const NameKey key{text_hash(name), 0};
    auto it = std::lower_bound(by_name.begin(), by_name.end(), key,
                               [&](const NameKey& a, const NameKey& b) {
                                 if (a.hash != b.hash) return a.hash < b.hash;
                                 return parameters[a.parameter].name < name;
                               });
    if (it == by_name.end() || it->hash != key.hash || parameters[it->parameter].name != name)
      return std::nullopt;
    return it->parameter;
  }

 private:
  void index_layers() {
    const std::size_t n = parameters.size();
    layer_members.resize(n);
    std::iota(layer_members.begin(), layer_members.end(), std::size_t{0});
    auto by_layer = [&](std::size_t a, std::size_t b) {
      return parameters[a].layer < parameters[b].layer;
    };
    // Models register layer by layer, so the list is usually sorted already.
    if (!std::is_sorted(layer_members.begin(), layer_members.end(), by_layer))
      std::stable_sort(layer_members.begin(), layer_members.end(), by_layer);
    layer_of.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const ParameterSpec& p = parameters[layer_members[i]];
      if (layers.empty() || layers.back().id != p.layer) {
        layer_member_begin.push_back(i);
        layers.push_back(LayerInfo{.id = p.layer, .dtype = p.dtype});
      }
      LayerInfo& g = layers.back();
      if (g.dtype != p.dtype)
        fail(ErrorKind::invalid_argument,
             "shard layout: layer " + std::to_string(g.id) + " mixes element types: " +
                 describe_parameter(parameters[layer_members[layer_member_begin.back()]]) +
                 " and " + describe_parameter(p) +
                 "; a layer is one flat buffer of one element type, so give them different layers");
      g.numel += p.numel;
      layer_of[layer_members[i]] = layers.size() - 1;
    }
    layer_member_begin.push_back(n);
  }

  void index_names() {
    by_name.reserve(parameters.size());
    for (std::size_t p = 0; p < parameters.size(); ++p)
      if (!parameters[p].name.empty()) by_name.push_back({text_hash(parameters[p].name), p});
    std::sort(by_name.begin(), by_name.end(), [&](const NameKey& a, const NameKey& b) {
      if (a.hash != b.hash) return a.hash < b.hash;
      return parameters[a.parameter].name < parameters[b.parameter].name;
    });
    for (std::size_t i = 1; i < by_name.size(); ++i) {
      const std::size_t a = by_name[i - 1].parameter;
      const std::size_t b = by_name[i].parameter;
      if (by_name[i - 1].hash == by_name[i].hash && parameters[a].name == parameters[b].name)
        fail(ErrorKind::invalid_argument,
             "shard layout: parameter name '" + parameters[a].name + "' is registered twice (#" +
                 std::to_string(std::min(a, b)) + " and #" + std::to_string(std::max(a, b)) +
                 "); names identify parameters in checkpoints and errors");
    }
  }
};

} // namespace zero::detail
